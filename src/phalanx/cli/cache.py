"""``phalanx cache …``: the node-local cache of this machine."""

from __future__ import annotations

import json
from dataclasses import asdict

import click
from rich.console import Console

from phalanx.storage.cache import NodeCache, human_size

console = Console()


def _human(n: int | None) -> str:
    return "none" if n is None else human_size(n)


@click.group("cache")
def cache_group() -> None:
    """The node cache (PHALANX_CACHE_DIR, PHALANX_CACHE_MAX, PHALANX_CACHE_MIN_FREE)."""


@cache_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(as_json: bool) -> int:
    """Where the cache is, what it holds and its limits."""
    usage = NodeCache.from_env().usage()
    if as_json:
        data = asdict(usage)
        data["root"] = str(usage.root)
        click.echo(json.dumps(data, indent=2))
        return 0
    console.print(f"[bold]folder[/bold]: {usage.root}")
    console.print(f"[bold]entries[/bold]: {usage.entries} ({usage.pinned} in use)")
    console.print(f"[bold]size[/bold]: {_human(usage.bytes)}")
    console.print(f"[bold]cap[/bold]: {_human(usage.max_bytes)}")
    console.print(f"[bold]keep free[/bold]: {_human(usage.min_free_bytes)}")
    return 0


@cache_group.command("clear")
def clear_cmd() -> int:
    """Remove every cached copy not in use right now (those in use are kept)."""
    cache = NodeCache.from_env()
    freed = cache.clear()
    left = cache.usage()
    console.print(
        f"freed {_human(freed)}; {left.entries} entr{'y' if left.entries == 1 else 'ies'} "
        f"in use kept ({_human(left.bytes)})"
    )
    return 0
