"""``phalanx``: the command-line entry point.

Errors the user can fix print one line, ``error: …`` (``job validate`` prints
one such line per problem of the spec), and exit 2; set
``PHALANX_DEBUG=1`` to see their traceback too. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from pathlib import Path

import click

from phalanx import __version__
from phalanx.errors import PhalanxError, UnknownName
from phalanx.limits import bounded

# Each command group's module is imported only when that group is called: a
# `phalanx job list` does not pay for the benchmark's or the datastores' imports.
_COMMANDS = {
    "job": "phalanx.cli.job:job_group",
    "datastore": "phalanx.cli.datastore:datastore_group",
    "data": "phalanx.cli.data:data_group",
    "cache": "phalanx.cli.cache:cache_group",
    "compute": "phalanx.cli.compute:compute_group",
    "model": "phalanx.cli.model:model_group",
    "environment": "phalanx.cli.environment:environment_group",
    "secret": "phalanx.cli.secret:secret_group",
    "tensorboard": "phalanx.cli.metrics:tensorboard_cmd",
    "bench": "phalanx.cli.bench:bench_group",
    "queue": "phalanx.cli.queue:queue_cmd",
    "server": "phalanx.cli.server:server_group",
    "studio": "phalanx.cli.studio:studio_cmd",
    "login": "phalanx.cli.login:login_cmd",
    "logout": "phalanx.cli.login:logout_cmd",
}


class _LazyGroup(click.Group):
    """A group whose commands live in modules imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _COMMANDS:
            module, _, attr = _COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="phalanx")
def cli() -> None:
    """phalanx: data-parallel training jobs on this machine or many."""


@cli.command("run")
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a spec field by its dotted path, e.g. --set inputs.epochs=3 (repeatable).",
)
@click.option("--all-ranks", is_flag=True, help="Stream every rank's log, prefixed by rank.")
def run_cmd(spec_file: Path, overrides: tuple[str, ...], all_ranks: bool) -> int:
    """Create a job and stream it; exits 0 if it completes, 1 if it fails, 3 if canceled."""
    from phalanx.cli.job import create_and_maybe_stream

    return create_and_maybe_stream(spec_file, overrides, stream=True, all_ranks=all_ranks)


def _database_down(exc: Exception) -> str | None:
    """One line for a database that went away after it was opened (PostgreSQL
    restarting, the network gone), or ``None`` for any other exception (a bug)."""
    sqlalchemy = sys.modules.get("sqlalchemy")
    if sqlalchemy is None or not isinstance(exc, sqlalchemy.exc.OperationalError):
        return None
    from phalanx.workspace.database import redact

    text = str(exc.orig or exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    url = os.environ.get("PHALANX_DB")
    if url:
        with contextlib.suppress(Exception):
            first = redact(first, sqlalchemy.engine.make_url(url).password)
    return (
        f"the workspace database stopped answering ({first}); check that it runs and that "
        "PHALANX_DB reaches it, then run the command again (PHALANX_DEBUG=1 shows more)"
    )


def _which_workspace(exc: BaseException) -> str:
    """For a name this machine's workspace does not know (the error, or what it was made
    from), which workspace that is: a user who meant a server's sees that none is set.
    A server's answer never names its folders, so nothing is added to one."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, UnknownName):
        cause = cause.__cause__
    if cause is None:
        return ""
    from phalanx.client.backends import local_home
    from phalanx.client.config import SERVER_ENV

    try:
        home = local_home()
    except PhalanxError:  # a server is set, though not usably: it said so already
        return ""
    return f" (in this machine's workspace {home}: {SERVER_ENV} is not set)" if home else ""


def main(argv: list[str] | None = None) -> None:
    debug = os.environ.get("PHALANX_DEBUG") == "1"
    try:
        rc = cli.main(args=argv, prog_name="phalanx", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except PhalanxError as exc:
        if debug:
            traceback.print_exc()
        lines = exc.lines()
        lines[-1] += _which_workspace(exc)
        for line in lines:
            click.echo(f"error: {bounded(line)}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug or not _database_down(exc):
            raise
        click.echo(f"error: {_database_down(exc)}", err=True)
        sys.exit(PhalanxError.exit_code)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
