"""The contract of a compute kind: everything phalanx asks of ``local``, ``ray`` or a
plug-in's kind, in one place.

A kind is one object, an instance of a :class:`ComputeKind` subclass, registered in the
``phalanx.compute_kinds`` entry-point group (:mod:`phalanx.compute.registry`). Its
package holds its settings model (what ``compute create`` flags, a compute YAML and the
SDK build), how it opens a :class:`~phalanx.compute.base.Compute` for a job, what it has
and what a job asks of it (for the scheduler), its create-time checks, how it is
described, and its capabilities. Nothing outside a kind's package asks which kind a
target is: it asks the target's kind object (:func:`~phalanx.compute.registry.kind_of`).

The scheduler's values (:class:`~phalanx.scheduler.model.Capacity`, ``Request``,
``QueuedJob``) are named here for their types only: a kind's package sits above the
scheduler and uses them; the scheduler sits above this contract and calls it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from phalanx.compute.base import Compute
    from phalanx.scheduler.model import Capacity, QueuedJob, Request
    from phalanx.spec import JobSpec
    from phalanx.workspace import Workspace


class TargetSettings(BaseModel):
    """What every target's settings have: its name and its kind (the ``type`` key of its
    record, its compute YAML and ``compute create --type``). A kind's settings model
    subclasses this with ``type: Literal["<kind>"]`` and its own fields."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: str


@dataclass(frozen=True)
class Capabilities:
    """What a target of a kind can do, for code that must choose without asking which
    kind it is."""

    elastic: bool = False
    """It grows by an autoscaler that phalanx asks for the nodes its queue needs."""
    low_priority: bool = False
    """Its nodes may be taken away (a node lost is a preemption, not a failure)."""
    shared_files: bool = True
    """Every node sees the workspace's job folders at the same path."""
    containers: bool = True
    """Its jobs may run in a container image."""
    prepares_on_nodes: bool = False
    """Each node makes the job's environment and image ready itself (another machine);
    else the supervisor does, on its own machine."""
    takes_token: bool = False
    """``compute create --store-token`` reads a token for it from stdin."""


@dataclass(frozen=True)
class Description:
    """A target as ``compute list`` shows it (``-``: not something the kind has)."""

    where: str
    placement: str = "-"
    nodes: str = "-"
    token: str = "-"


class ComputeKind(ABC):
    """One compute kind. Subclasses set the class attributes and implement the abstract
    methods; the others have the answer of a kind that needs nothing there."""

    name: ClassVar[str]
    """The kind's name: ``type`` in records, YAML and ``compute create --type``."""
    settings: ClassVar[type[TargetSettings]]
    """Its targets' settings model."""
    builtin: ClassVar[str | None] = None
    """The name of a target of this kind that exists without being registered (``local``)."""
    example: ClassVar[Mapping[str, Any]] = {}
    """``compute create`` options (besides the name) of a typical target: what the
    conformance suite (tests/unit/compute/test_kinds.py) builds one from."""

    # -- settings ------------------------------------------------------------------
    @abstractmethod
    def build(self, options: Mapping[str, Any]) -> TargetSettings:
        """The settings that ``compute create``'s options describe (flags by name, as
        :class:`~phalanx.service.targets.TargetCreate` holds them; ``None``: not given),
        checked with no workspace: the CLI runs this before it sends a request.

        Raises:
            PhalanxError: an option this kind does not take, or a malformed value,
                naming the flag.
        """

    def inline(self, compute: str) -> TargetSettings | None:
        """The target a job spec's ``compute`` names inline (``ray://head:10001``); ``None``
        when ``compute`` is no such thing for this kind."""
        return None

    def public(self, target: TargetSettings) -> dict[str, Any]:
        """The target's settings as anyone may read them (a secret as where it comes
        from, never its value)."""
        return target.model_dump()

    def capabilities(self, target: TargetSettings) -> Capabilities:
        return Capabilities()

    # -- creation ------------------------------------------------------------------
    def prepare(
        self, ws: Workspace, target: TargetSettings, options: Mapping[str, Any]
    ) -> TargetSettings:
        """Checks against the workspace and the world before ``target`` is recorded (a
        device taken, nothing listening at an address), and what it keeps on the side (a
        token into the secrets file); the settings to record.

        Raises:
            PhalanxError: one line, naming the flag and the fix.
        """
        return target

    def check_record(self, ws: Workspace, target: TargetSettings) -> None:
        """What every record of this kind must satisfy, checked as it is written (also
        for targets made without :meth:`prepare`, as the SDK and tests do)."""
        return None  # nothing to do for a kind that does not say otherwise

    def created(self, ws: Workspace, target: TargetSettings) -> None:
        """Called once ``target`` is recorded (e.g. to ask for its minimum nodes now)."""
        return None  # nothing to do for a kind that does not say otherwise

    @abstractmethod
    def describe(self, ws: Workspace, target: TargetSettings) -> Description:
        """Where the target is and what it has, in a line for ``compute list``."""

    # -- jobs ----------------------------------------------------------------------
    @abstractmethod
    def open(self, target: TargetSettings, ws: Workspace, cancelled: Callable[[], bool]) -> Compute:
        """The compute that runs a job's nodes on ``target``.

        Args:
            cancelled: Polled while waiting for nodes.

        Raises:
            PhalanxError: the target cannot be used (its token cannot be read).
        """

    def check_open(self, ws: Workspace, target: TargetSettings) -> None:
        """What :meth:`open` needs that can be checked when a job is created (a token
        that can be read)."""
        return None  # nothing to do for a kind that does not say otherwise

    def admit(self, ws: Workspace, target: TargetSettings, tier: int) -> None:
        """Refuse a job of ``tier`` (``queue_settings.job_tier``) the target must not run.

        Raises:
            PhalanxError: naming ``queue_settings.job_tier`` and the fix.
        """
        return None  # nothing to do for a kind that does not say otherwise

    # -- the scheduler ---------------------------------------------------------------
    @abstractmethod
    def capacity(self, ws: Workspace, target: TargetSettings) -> Capacity | None:
        """What the target could ever give a job, to refuse one that never fits when it
        is created (an elastic target at its largest); ``None``: not known here."""

    @abstractmethod
    def request(self, spec: JobSpec, target: TargetSettings, capacity: Capacity | None) -> Request:
        """What each of the job's nodes asks of ``target``, given :meth:`capacity`.

        Raises:
            PhalanxError: the job can never fit the target, or asks what it cannot give.
        """

    @abstractmethod
    def capacity_now(
        self, ws: Workspace, target: TargetSettings, queued: list[QueuedJob]
    ) -> Capacity | None:
        """What the target has for a scheduling round (its hosts, what they hold elsewhere,
        how it may grow); ``None``: it cannot be told now, and the round passes it by."""

    def screen(
        self, ws: Workspace, target: TargetSettings, queued: list[QueuedJob]
    ) -> dict[str, str]:
        """Queued jobs that may no longer wait on ``target`` (it changed since they were
        queued) → why they fail."""
        return {}

    def idle(self, ws: Workspace, target: TargetSettings) -> None:
        """A scheduling round's look at a target with nothing queued or running."""
        return None  # nothing to do for a kind that does not say otherwise

    def queue_view(self, ws: Workspace, target: TargetSettings) -> dict[str, Any]:
        """What the target has, for ``phalanx queue`` and ``compute show``:
        ``{"capacity": {"hosts": [...]} or None, ...}`` and any keys of its own."""
        return {"capacity": None}
