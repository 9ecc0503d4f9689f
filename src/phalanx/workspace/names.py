"""Readable generated job names (``brave_falcon_3fa9c2``)."""

from __future__ import annotations

import re
import secrets

_ADJECTIVES = (
    "amber",
    "bold",
    "brave",
    "bright",
    "calm",
    "clever",
    "crisp",
    "eager",
    "fair",
    "fleet",
    "gentle",
    "golden",
    "grand",
    "happy",
    "hardy",
    "keen",
    "kind",
    "lively",
    "lucid",
    "merry",
    "mellow",
    "nimble",
    "noble",
    "polite",
    "proud",
    "quick",
    "quiet",
    "rapid",
    "serene",
    "sharp",
    "silver",
    "sleek",
    "smart",
    "steady",
    "stout",
    "sunny",
    "swift",
    "tidy",
    "upbeat",
    "vivid",
    "warm",
    "wise",
    "witty",
    "zesty",
)
_NOUNS = (
    "anchor",
    "badger",
    "beacon",
    "birch",
    "canyon",
    "cedar",
    "comet",
    "coral",
    "crane",
    "delta",
    "falcon",
    "fern",
    "fjord",
    "garnet",
    "glacier",
    "harbor",
    "heron",
    "island",
    "jasper",
    "kestrel",
    "lagoon",
    "lantern",
    "maple",
    "meadow",
    "mesa",
    "otter",
    "orchid",
    "pebble",
    "pine",
    "plover",
    "quartz",
    "raven",
    "reef",
    "river",
    "sable",
    "spruce",
    "summit",
    "tern",
    "thistle",
    "tundra",
    "walrus",
    "willow",
    "wren",
    "yarrow",
)

# Azure ML's rule for job names, which phalanx keeps so names travel both ways;
# datastores are named the same way.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$")
# Data assets and models may also use '.', as Azure ML's do; versions likewise, shorter.
ASSET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def generate_name() -> str:
    """A fresh name: adjective, noun and 6 hex digits (16.7M suffixes per word pair)."""
    return f"{secrets.choice(_ADJECTIVES)}_{secrets.choice(_NOUNS)}_{secrets.token_hex(3)}"
