"""The container engine phalanx calls: podman, or docker where that is what the machine has.

``PHALANX_CONTAINER_ENGINE`` chooses (``podman``, ``docker``, or a path to either);
otherwise podman is taken when it is on ``PATH``, then docker. podman needs no
daemon and runs the launcher as a child of the process that started it, which is
what phalanx's signal and sweep paths expect; docker is driven through its CLI the
same way.

podman reads phalanx's own ``containers.conf`` (shipped next to this module: runc,
and fixed file and process limits, which work on hosts where podman's defaults do
not). It is given through ``CONTAINERS_CONF`` to the podman commands phalanx runs,
and only when the user has not set ``CONTAINERS_CONF`` themselves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import PhalanxError

ENGINE_ENV = "PHALANX_CONTAINER_ENGINE"
CONTAINERS_CONF = Path(__file__).with_name("containers.conf")
"""phalanx's containers.conf for podman."""
KNOWN = ("podman", "docker")


@dataclass(frozen=True)
class Engine:
    """A container engine's CLI."""

    name: str
    """``podman`` or ``docker``."""
    path: str
    """Its executable."""

    @property
    def is_podman(self) -> bool:
        return self.name == "podman"

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment to run the engine's CLI in: ``base`` (this process's when
        ``None``), with phalanx's ``CONTAINERS_CONF`` for podman unless one is set."""
        env = dict(os.environ if base is None else base)
        if self.is_podman and not env.get("CONTAINERS_CONF"):
            env["CONTAINERS_CONF"] = str(CONTAINERS_CONF)
        return env

    def run(
        self, args: Sequence[str], *, timeout: float = 120.0, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``ENGINE args…`` and return what it printed (never raises on its exit code).

        Raises:
            PhalanxError: the engine did not answer within ``timeout`` seconds.
        """
        try:
            return subprocess.run(
                [self.path, *args],
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL if input is None else None,
            )
        except subprocess.TimeoutExpired as exc:
            raise PhalanxError(
                f"{self.name} {' '.join(args[:2])} did not answer in {timeout:.0f} s"
            ) from exc
        except OSError as exc:
            raise PhalanxError(f"{self.path}: {exc.strerror}") from exc


def find_engine(env: Mapping[str, str] | None = None) -> Engine:
    """The engine to use on this machine.

    Raises:
        PhalanxError: none is installed, or ``PHALANX_CONTAINER_ENGINE`` names one that
            is not.
    """
    env = os.environ if env is None else env
    chosen = env.get(ENGINE_ENV, "").strip()
    if chosen:
        path = shutil.which(chosen)
        name = Path(chosen).name
        if path is None or name not in KNOWN:
            raise PhalanxError(
                f"{ENGINE_ENV}={chosen}: not an installed podman or docker; install one, or "
                f"unset {ENGINE_ENV} to use what is on PATH"
            )
        return Engine(name, path)
    for name in KNOWN:
        if path := shutil.which(name):
            return Engine(name, path)
    raise PhalanxError(
        "environment.image needs a container engine and this machine has none: install "
        "podman (apt-get install podman runc) or docker, or drop environment.image to run "
        "in phalanx's Python environment"
    )


def last_line(text: str) -> str:
    """An engine's error output in one line (its last non-empty line, ``Error: `` dropped)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[-1] if lines else "no output"
    return line.removeprefix("Error: ")[:300]
