"""Compute targets: where a job's nodes come from, as the workspace records them.

A target is the settings of one compute kind (:mod:`phalanx.compute.kind`): ``compute:
local`` (the default, this machine), a target registered with ``phalanx compute
create --type KIND`` and named (``compute: gpu-cluster`` or Azure ML's ``compute:
azureml:gpu-cluster``), or one a kind lets a job spec name inline (a Ray address).
Which kind a target is, and what that means, only its kind object knows
(:func:`~phalanx.compute.registry.kind_of`); this module keeps the records.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from phalanx.compute.kind import TargetSettings
from phalanx.compute.registry import builtin, kind_of, kinds, load
from phalanx.errors import PhalanxError, UnknownName
from phalanx.storage.secrets import SecretStore
from phalanx.workspace import Workspace

if TYPE_CHECKING:
    from phalanx.compute.base import Compute

TARGET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

Target = TargetSettings
"""A target's settings, of whichever kind."""


def resolve_target(compute: str, ws: Workspace) -> Target:
    """The target a spec's ``compute`` names: a built-in one (``local``), a registered
    one, or one a kind names inline (a Ray address).

    Raises:
        PhalanxError: an unknown target name.
    """
    for kind in kinds().values():
        inline = kind.inline(compute)
        if inline is not None:
            return inline
    name = compute.removeprefix("azureml:")
    own = builtin(name)
    if own is not None:
        rows = ws.query("SELECT config_json FROM computes WHERE name = :name", {"name": name})
        if rows:
            return _load(rows[0]["config_json"])
        return own.settings.model_validate({"name": name, "type": own.name})
    return get_target(ws, name)


def open_compute(
    target: Target, ws: Workspace, *, cancelled: Callable[[], bool] = lambda: False
) -> Compute:
    """The compute that runs a job's nodes on ``target`` (its token resolved now).

    Args:
        cancelled: Polled while waiting for a cluster to place the nodes.

    Raises:
        PhalanxError: the target cannot be used (its token cannot be read).
    """
    return kind_of(target).open(target, ws, cancelled)


def create_target(ws: Workspace, target: Target, *, owner: str | None = None) -> None:
    """Record ``target``, after its kind's record checks (a token must already be a
    reference). ``owner``: the server's admin who made it (``None`` on this machine).

    Raises:
        PhalanxError: the name is invalid, reserved or taken, a built-in target's name
            given to another kind, or the kind's checks fail (a local target's GPUs are
            another's too).
    """
    from phalanx.tracking.protocol import OUTSIDE_TARGET
    from phalanx.workspace.trials import SWEEP_TARGET

    kind = kind_of(target)
    own = builtin(target.name)
    # OUTSIDE_TARGET marks the runs a notebook makes, which their makers write from
    # outside: a target of that name would let its jobs' owners write into running jobs.
    # SWEEP_TARGET marks sweep jobs, which the scheduler never places.
    if (
        not TARGET_NAME_RE.fullmatch(target.name)
        or (own is not None and own is not kind)
        or target.name.lower() in (OUTSIDE_TARGET, SWEEP_TARGET)
    ):
        builtins = ", ".join(
            f"'{k.builtin}' only with --type {k.name}" for k in kinds().values() if k.builtin
        )
        raise PhalanxError(
            f"compute name {target.name!r} is invalid or reserved: use letters, digits, '_' "
            f"and '-' ({builtins}, for this machine's own settings; "
            f"'{OUTSIDE_TARGET}' is MLflow runs made outside any job, '{SWEEP_TARGET}' "
            "sweep jobs)"
        )
    kind.check_record(ws, target)
    from sqlalchemy.exc import IntegrityError  # loaded where the database is written

    try:
        with ws.transaction() as tx:
            tx.execute(
                "INSERT INTO computes (name, type, config_json, created_at, owner)"
                " VALUES (:name, :type, :config, :now, :owner)",
                {"name": target.name, "type": target.type,
                 "config": target.model_dump_json(exclude_none=True), "now": time.time(),
                 "owner": owner},
            )  # fmt: skip
    except IntegrityError as exc:
        raise PhalanxError(
            f"compute {target.name!r} already exists; `phalanx compute delete` it first"
        ) from exc


def get_target(ws: Workspace, name: str) -> Target:
    """The registered target ``name``.

    Raises:
        UnknownName: no such target.
    """
    rows = ws.query("SELECT config_json FROM computes WHERE name = :name", {"name": name})
    if not rows:
        known = [*builtins(), *(t.name for t in list_targets(ws))]
        raise UnknownName("compute target", name, known, "`phalanx compute list` shows them")
    return _load(rows[0]["config_json"])


def list_targets(ws: Workspace) -> list[Target]:
    return [
        _load(r["config_json"]) for r in ws.query("SELECT config_json FROM computes ORDER BY name")
    ]


def builtins() -> list[str]:
    """The names of the targets that exist without being registered (``local``)."""
    return [k.builtin for k in kinds().values() if k.builtin is not None]


def delete_target(ws: Workspace, name: str) -> None:
    """Forget a target and its stored token; a built-in target (``local``) is then what
    it is when nothing was registered for it (so deleting it again does nothing).

    Raises:
        UnknownName: no such target.
    """
    if builtin(name) is None:
        get_target(ws, name)
    with ws.transaction() as tx:
        tx.execute("DELETE FROM computes WHERE name = :name", {"name": name})
        # What its probe read and asked: a target made again under the name starts afresh.
        tx.execute("DELETE FROM scaling WHERE target = :name", {"name": name})
    SecretStore(ws.home).delete_prefix(f"compute/{name}/")


def _load(config_json: str) -> Target:
    return load(json.loads(config_json))
