"""``phalanx server …``: run the team server and manage its API tokens."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from phalanx.errors import PhalanxError
from phalanx.service.access import DEFAULT_MAX_QUEUED
from phalanx.sizes import parse_size
from phalanx.terminal.columns import print_table, short_time

console = Console()


@click.group("server")
def server_group() -> None:
    """The phalanx server: one workspace for a team, over HTTP."""


@server_group.command("start")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=8765, show_default=True)
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    help="The workspace folder it owns (default: PHALANX_HOME, or ~/.phalanx; as root whose "
    "home other accounts cannot enter, /var/lib/phalanx).",
)
@click.option(
    "--db",
    metavar="URL",
    help="The database: a postgresql://user@host/name URL (default: SQLite in the workspace).",
)
@click.option(
    "--auth/--no-auth",
    default=None,
    help="Ask for API tokens (the default unless --host is a loopback address).",
)
@click.option("--max-upload", default="1G", show_default=True, help="Largest upload (code, data).")
@click.option(
    "--datastore-root",
    "datastore_roots",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A folder of this machine that `local` datastores made through the server may "
    "name (itself or inside it; an admin's token only). Repeat for several; none: no "
    "`local` datastore can be made through the server.",
)
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Serving processes on the one port (default: one per core, at most 4).",
)
@click.option(
    "--trust-jobs",
    is_flag=True,
    help="Run jobs as the server's own account, not walled off: any job can then read "
    "the database, secrets and tokens (only where every token holder is trusted).",
)
@click.option(
    "--max-queued-per-user",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_QUEUED,
    show_default=True,
    help="The most jobs one user may have waiting: queued and not started yet, and "
    "sweeps not over (their trials are bounded by max_concurrent_trials). A create past "
    "it is refused (HTTP 429). 0: no bound.",
)
@click.option(
    "--job-uids",
    metavar="START-END",
    help="The uids (and gids) walled-off jobs get, one each (default 1879048192-1879113727).",
)
def start_cmd(
    host: str,
    port: int,
    workspace: Path | None,
    db: str | None,
    auth: bool | None,
    max_upload: str,
    datastore_roots: tuple[Path, ...],
    tls_cert: Path | None,
    tls_key: Path | None,
    workers: int | None,
    trust_jobs: bool,
    max_queued_per_user: int,
    job_uids: str | None,
) -> int:
    """Serve the workspace; runs in the foreground (systemd: see docs/deploy.md)."""
    import os

    from phalanx.server.serve import default_workers, serve
    from phalanx.workspace.layout import server_home

    if db:
        os.environ["PHALANX_DB"] = db  # the scheduler and supervisors inherit it
    try:
        upload_limit = parse_size(max_upload)
    except ValueError as exc:
        raise PhalanxError(f"--max-upload: {exc}") from None
    serve(
        home=(workspace or server_home()).absolute(),
        host=host,
        port=port,
        auth=auth,
        max_upload=upload_limit,
        datastore_roots=datastore_roots,
        tls_cert=tls_cert,
        tls_key=tls_key,
        workers=default_workers() if workers is None else workers,
        trust_jobs=trust_jobs,
        job_uids=job_uids,
        max_queued_per_user=max_queued_per_user or None,
    )
    return 0


@server_group.group("token")
def token_group() -> None:
    """API tokens: on the server's machine against its workspace, or through the server
    PHALANX_SERVER names with an admin's token."""


@token_group.command("create")
@click.option("--user", required=True, help="Who the token is for; what it makes is theirs.")
@click.option("--name", help="A name to revoke it by (default: USER-xxxxxx).")
@click.option(
    "--role",
    type=click.Choice(["admin", "member", "viewer"]),
    default=None,
    help="admin: everything, tokens and the server's own paths and variables included; "
    "member: creates jobs, assets and datastores, acts on its own; viewer: reads only. "
    "Default: admin for the workspace's first admin token, else member.",
)
def token_create_cmd(user: str, name: str | None, role: str | None) -> int:
    """Make a token; it is printed once and only its hash is kept."""
    from phalanx.client.backends import tokens

    info, token = tokens().create(user, name, role)
    click.echo(token)
    click.echo(
        f"token {info['name']} for {info['user']} ({info['role']}): keep it now, it is not "
        "shown again (clients: PHALANX_TOKEN=… or phalanx login)",
        err=True,
    )
    return 0


@token_group.command("list")
def token_list_cmd() -> int:
    """The tokens (names, users and roles, never the tokens)."""
    from phalanx.client.backends import tokens

    rows = [
        (
            info["name"],
            info["user"],
            info["role"],
            short_time(info["created_at"]),
            short_time(info["last_used_at"]),
        )
        for info in tokens().list_all()
    ]
    headers = ("NAME", "USER", "ROLE", "CREATED", "LAST USED")
    print_table(console, headers, rows, optional=("CREATED",))
    return 0


@token_group.command("revoke")
@click.argument("name")
def token_revoke_cmd(name: str) -> int:
    """Forget a token; requests carrying it are refused from now on."""
    from phalanx.client.backends import tokens

    tokens().revoke(name)
    console.print(f"token {name} revoked")
    return 0
