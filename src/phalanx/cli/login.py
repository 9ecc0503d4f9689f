"""``phalanx login`` / ``phalanx logout``: remember a server and its token for this user."""

from __future__ import annotations

import click

from phalanx.client.config import ServerConfig, check_url, login_file, save_login


@click.command("login")
@click.argument("server")
@click.option(
    "--token", help="The API token (asked for when left out; empty on a loopback server)."
)
def login_cmd(server: str, token: str | None) -> int:
    """Use SERVER (http(s)://host:port) for every command, checking the token first."""
    from phalanx.client.http import ServerClient

    url = check_url(server, "SERVER")
    if token is None:
        token = click.prompt("token", hide_input=True, default="", show_default=False) or None
    client = ServerClient(ServerConfig(url, token))
    try:
        client.request("GET", "/jobs", params={"limit": 1})
        who = client.request("GET", "/whoami")
    finally:
        client.close()
    path = save_login(url, token)
    user = who.get("user") or "(no auth)"
    click.echo(f"logged in to {url} as {user}; saved in {path} (0600). phalanx logout forgets it")
    return 0


@click.command("logout")
def logout_cmd() -> int:
    """Forget the server ``phalanx login`` saved; commands use this machine's workspace again."""
    path = login_file()
    if path.exists():
        path.unlink()
        click.echo(f"removed {path}")
    else:
        click.echo("not logged in")
    return 0
