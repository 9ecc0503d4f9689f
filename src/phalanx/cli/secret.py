"""``phalanx secret …``: the secrets a job's environment variables name.

A token pasted into a spec is kept with the spec and shown with it; a secret is
kept once and named instead::

    printf %s "$HF_TOKEN" | phalanx secret set HF_TOKEN
    # job.yml
    environment_variables:
      HF_TOKEN: ${{secrets.HF_TOKEN}}

The value is never an argument (command lines end up in shell history and
``ps``): it is read from stdin (asked for, hidden, on a terminal). With
``PHALANX_SERVER`` set the secret is kept by the server, as the token's user's.
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console

from phalanx.client.backends import secrets

console = Console()


@click.group("secret")
def secret_group() -> None:
    """Values a job's environment variables name as ${{secrets.NAME}}."""


@secret_group.command("set")
@click.argument("name")
def set_cmd(name: str) -> int:
    """Keep NAME's value, read from stdin (replacing an earlier one)."""
    if sys.stdin.isatty():
        value = str(click.prompt(f"value of {name}", hide_input=True))
    else:
        value = sys.stdin.read().removesuffix("\n")
    secrets().set(name, value)
    console.print(f"secret [bold]{name}[/bold] set; name it as ${{{{secrets.{name}}}}}",
                  highlight=False)  # fmt: skip
    return 0


@secret_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(as_json: bool) -> int:
    """The names of your secrets (never a value)."""
    names = secrets().list_names()
    if as_json:
        click.echo(json.dumps(names))
    else:
        for name in names:
            click.echo(name)
    return 0


@secret_group.command("delete")
@click.argument("name")
def delete_cmd(name: str) -> int:
    """Forget secret NAME; a job that names it then fails to start."""
    secrets().delete(name)
    console.print(f"secret [bold]{name}[/bold] deleted", highlight=False)
    return 0


__all__ = ["secret_group"]
