"""A job's plan: what it needs, worked out once from its spec and the workspace.

The plan is the same whatever compute runs the job (:func:`phalanx.jobs.prepare.plan`
makes it): where each data input is, what each output becomes and where it goes,
the command before substitution, the environment variables and the software
environment asked for. Where the nodes run, :func:`phalanx.compute.ready.make_ready`
makes the inputs ready and substitutes the command from it: the supervisor does so
for local compute, each node's agent for Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.spec import InputSpec
from phalanx.spec.environment import EnvironmentSpec
from phalanx.storage.location import Location


@dataclass(frozen=True, kw_only=True)
class OutputPlan:
    """Where one output is written on the workspace's machine, and where it goes after."""

    value: Path
    """What ``${{outputs.NAME}}`` becomes: the folder, or a ``uri_file``'s file in it."""
    folder: Path
    """The folder written (a ``uri_file``'s: the one its file is in)."""
    file: str | None = None
    """``uri_file``: the file's name in :attr:`folder`."""
    dest: Location | None = None
    """A datastore the folder is copied to (``upload``) or mounted from (``rw_mount``)."""
    rw_mount: bool = False
    """:attr:`folder` is a read-write mount of :attr:`dest` for the whole job."""


@dataclass(frozen=True, kw_only=True)
class JobPlan:
    """What a job needs, whatever compute runs it."""

    job_dir: Path
    """The job's folder in the workspace."""
    command: str
    """The spec's command, ``${{...}}`` not yet substituted."""
    literals: dict[str, str]
    """Inputs that are values, rendered."""
    data_inputs: dict[str, InputSpec]
    locations: dict[str, Location]
    """Where each data input is (resolved and checked, not yet made ready)."""
    outputs: dict[str, OutputPlan]
    env: dict[str, str]
    """The spec's ``environment_variables``."""
    environment: EnvironmentSpec | None = None
    """The software environment (inline, a registered one put inline), if any."""
    datastores: dict[str, Any] = field(default_factory=dict, repr=False)
    """The job's datastores file (:mod:`phalanx.storage.jobstores`), credentials resolved:
    written where its ranks run, for them to resolve ``azureml://datastores/…`` (a remote
    ``Checkpointer``, a ``direct`` input), and never kept in the job's folder."""

    @property
    def output_values(self) -> dict[str, str]:
        """What each ``${{outputs.NAME}}`` becomes on the workspace's machine."""
        return {name: str(out.value) for name, out in self.outputs.items()}

    @property
    def output_dirs(self) -> dict[str, Path]:
        """Each output's folder on the workspace's machine (where shipped files land)."""
        return {name: out.folder for name, out in self.outputs.items()}

    @property
    def output_files(self) -> dict[str, str]:
        """``uri_file`` outputs: the file's name inside its folder."""
        return {name: out.file for name, out in self.outputs.items() if out.file is not None}
