"""``phalanx studio``: the web page of this machine's workspace, on loopback."""

from __future__ import annotations

from pathlib import Path

import click

from phalanx.errors import PhalanxError
from phalanx.studio.urls import STUDIO_PORT


@click.command("studio")
@click.option("--port", type=int, default=STUDIO_PORT, show_default=True)
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    help="The workspace folder (default: PHALANX_HOME, or ~/.phalanx).",
)
def studio_cmd(port: int, workspace: Path | None) -> int:
    """Open the studio of this machine's workspace: jobs, live logs, metrics.

    Listens on 127.0.0.1 only, without auth (a team's studio is its server's:
    phalanx server start serves it under /). Prints the address to open.
    """
    import os

    from phalanx.server.serve import serve
    from phalanx.server.settings import DEFAULT_MAX_UPLOAD
    from phalanx.workspace.layout import phalanx_home

    if os.environ.get("PHALANX_SERVER"):
        server = os.environ["PHALANX_SERVER"].rstrip("/")
        raise PhalanxError(
            f"PHALANX_SERVER is set: the studio of that workspace is {server}/ "
            "(unset PHALANX_SERVER for this machine's)"
        )
    serve(
        home=(workspace or phalanx_home()).absolute(),
        host="127.0.0.1",
        port=port,
        auth=False,
        max_upload=DEFAULT_MAX_UPLOAD,
        studio_only=True,
    )
    return 0
