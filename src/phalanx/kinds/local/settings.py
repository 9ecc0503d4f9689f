"""A local target's settings: a part of this machine (or all of it) that jobs are
scheduled on, and the ``--gpus`` list it is given."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from phalanx.compute.kind import TargetSettings

LOCAL = "local"
"""The kind's name, and its built-in target's: this machine, with what it finds."""


class LocalTarget(TargetSettings):
    """A part of this machine (or all of it) that jobs are scheduled on."""

    name: str = LOCAL
    type: Literal["local"] = "local"
    gpus: tuple[str, ...] | None = None
    """GPU ids jobs may be given (``CUDA_VISIBLE_DEVICES`` values); found with
    ``nvidia-smi`` when ``None``."""
    cpus: float | None = Field(default=None, gt=0)
    """CPU slots: for the built-in ``local``, this machine's, which every local target's
    jobs share (its cores when ``None``); for another, the most of them its jobs hold at
    once (all when ``None``)."""
    memory: int | None = Field(default=None, gt=0)
    """Bytes of memory jobs may ask for, the same way: the machine's for ``local`` (all of
    it when ``None``), a share of it for another."""

    @field_validator("gpus", mode="before")
    @classmethod
    def _parse_gpus(cls, value: object) -> object:
        return parse_devices(value) if isinstance(value, str) else value


def parse_devices(text: str) -> tuple[str, ...]:
    """``0-3,6`` → ``("0", "1", "2", "3", "6")``; ``none`` or empty → no GPUs.

    Raises:
        ValueError: a part is neither a number, a range nor a device UUID.
    """
    text = text.strip()
    if text.lower() in ("", "none"):
        return ()
    devices: list[str] = []
    for part in text.split(","):
        part = part.strip()
        first, dash, last = part.partition("-")
        if dash and first.isdigit() and last.isdigit() and int(first) <= int(last):
            devices.extend(str(i) for i in range(int(first), int(last) + 1))
        elif part.isdigit() or re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z/-]+", part):
            devices.append(part)
        else:
            raise ValueError(
                f"--gpus {text!r}: {part!r} is not a device number, a range (0-3) or a GPU UUID"
            )
    if len(set(devices)) != len(devices):
        raise ValueError(f"--gpus {text!r} names a device twice")
    return tuple(devices)
