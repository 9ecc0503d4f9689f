"""``phalanx``: the command-line entry point.

Errors the user can fix print one line, ``error: …`` (``job validate`` prints
one such line per problem of the spec), and exit 2; set
``PHALANX_DEBUG=1`` to see their traceback too. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import click

from phalanx import __version__
from phalanx.cli.bench import bench_group
from phalanx.cli.cache import cache_group
from phalanx.cli.compute import compute_group
from phalanx.cli.data import data_group
from phalanx.cli.datastore import datastore_group
from phalanx.cli.job import create_and_maybe_stream, job_group, set_option
from phalanx.cli.metrics import tensorboard_cmd
from phalanx.cli.model import model_group
from phalanx.cli.queue import queue_cmd
from phalanx.errors import PhalanxError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="phalanx")
def cli() -> None:
    """phalanx: data-parallel training jobs on this machine or many."""


cli.add_command(job_group)
cli.add_command(datastore_group)
cli.add_command(data_group)
cli.add_command(cache_group)
cli.add_command(compute_group)
cli.add_command(model_group)
cli.add_command(tensorboard_cmd)
cli.add_command(bench_group)
cli.add_command(queue_cmd)


@cli.command("run")
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@set_option
@click.option("--all-ranks", is_flag=True, help="Stream every rank's log, prefixed by rank.")
def run_cmd(spec_file: Path, overrides: tuple[str, ...], all_ranks: bool) -> int:
    """Create a job and stream it; exits 0 if it completes, 1 if it fails, 3 if canceled."""
    return create_and_maybe_stream(spec_file, overrides, stream=True, all_ranks=all_ranks)


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
        for line in exc.lines():
            click.echo(f"error: {line}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
