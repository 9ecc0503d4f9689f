"""Register a completed job's named outputs: ``outputs.<o>.name`` (and ``version``).

A ``custom_model`` output becomes a model version (its files copied into the
registry, with the job and its last metrics recorded); a ``uri_folder`` or
``uri_file`` output becomes a data asset version pointing at where the output
was written.
"""

from __future__ import annotations

import functools
import logging

from phalanx.errors import DatabaseUnavailable, PhalanxError
from phalanx.spec import JobSpec
from phalanx.spec.parts import OutputSpec
from phalanx.workspace import Workspace

log = logging.getLogger(__name__)


def check_registrations(spec: JobSpec, ws: Workspace) -> None:
    """Refuse, before the job runs, a registration whose version is taken already.

    Raises:
        PhalanxError: naming the output and the version.
    """
    from phalanx.registry.models import get_model
    from phalanx.storage.assets import get_asset

    claimed: dict[tuple[bool, str, str], str] = {}
    for key, out in spec.outputs.items():
        if out.name is None or out.version is None:
            continue
        pair = (out.type == "custom_model", out.name, out.version)
        if pair in claimed:
            raise PhalanxError(
                f"outputs.{key} and outputs.{claimed[pair]} both register {out.name}:"
                f"{out.version}; give one of them another name or version"
            )
        claimed[pair] = key
        lookup = get_model if out.type == "custom_model" else get_asset
        try:
            lookup(ws, out.name, out.version)
        except DatabaseUnavailable:
            raise
        except PhalanxError:
            continue
        kind = "model" if out.type == "custom_model" else "data asset"
        raise PhalanxError(
            f"outputs.{key}: {kind} {out.name}:{out.version} already exists and versions are "
            "immutable; change its version: or leave it out to get the next number"
        )


def register_outputs(spec: JobSpec, ws: Workspace, job_name: str) -> list[str]:
    """Register every named output of the completed job ``job_name``.

    Returns:
        What was registered, one ``name:version`` each.

    Raises:
        PhalanxError: naming the output that could not be registered.
    """
    from phalanx.registry import register_model
    from phalanx.registry.sources import job_output
    from phalanx.storage.assets import create_asset
    from phalanx.workspace.owners import is_admin_user

    def publisher() -> tuple[str | None, bool]:
        # As the job's owner, with the rights they hold now: a name another registered
        # while the job ran is theirs (it was checked at create too).
        owner = ws.get_job(job_name).created_by
        with ws.transaction() as tx:
            return owner, is_admin_user(tx, owner)

    owner, admin = ws.database.retrying(publisher)

    def register(key: str, out: OutputSpec, name: str) -> str:
        if out.type == "custom_model":
            model = register_model(
                ws,
                name=name,
                version=out.version,
                path=f"azureml://jobs/{job_name}/outputs/{key}",
                description=f"outputs.{key} of job {job_name}",
                owner=owner,
                admin=admin,
            )
            return f"model {model.name}:{model.version}"
        path = out.path if out.path is not None else job_output(ws, job_name, key).path
        asset = create_asset(
            ws,
            name=name,
            version=out.version,
            path=path,
            type=out.type,
            description=f"outputs.{key} of job {job_name}",
            owner=owner,
            admin=admin,
        )
        return f"data asset {asset.name}:{asset.version}"

    done: list[str] = []
    for key, out in spec.outputs.items():
        name = out.name
        if name is None:
            continue
        try:
            # One record per output, written in one transaction: repeated whole
            # while the database is unavailable (within the workspace's patience).
            done.append(ws.database.retrying(functools.partial(register, key, out, name)))
        except DatabaseUnavailable:
            raise
        except PhalanxError as exc:
            raise PhalanxError(f"outputs.{key}: registering {name} failed: {exc}") from exc
        log.info("outputs.%s: registered as %s", key, done[-1])
    return done
