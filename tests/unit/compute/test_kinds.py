"""The compute-kind conformance suite: the same checks against every registered kind,
phalanx's own and the test-only ``fake`` (tests/plugins/phalanx_fake_kind.py), which
registers itself through an entry point in a folder put on the path, as a third
party's package would. No job, no server: tests/system/compute/test_kinds.py runs a
job on the fake kind through the CLI, the server and the scheduler."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

import fakekind
from phalanx.compute import registry
from phalanx.compute.kind import Capabilities, ComputeKind, Description, TargetSettings
from phalanx.compute.targets import (
    create_target,
    delete_target,
    get_target,
    list_targets,
    resolve_target,
)
from phalanx.errors import PhalanxError
from phalanx.scheduler.model import Capacity, Request
from phalanx.service.targets import TargetCreate, WorkspaceTargets, check_request
from phalanx.spec import JobSpec
from phalanx.workspace import Workspace


@pytest.fixture(scope="module", autouse=True)
def _fake_kind_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The fake kind's folder on ``sys.path``, the registry read again with it."""
    folder = fakekind.install(tmp_path_factory.mktemp("plugins"))
    sys.path.insert(0, str(folder))
    registry.names.cache_clear()
    registry.kinds.cache_clear()
    yield
    sys.path.remove(str(folder))
    sys.modules.pop("phalanx_fake_kind", None)
    registry.names.cache_clear()
    registry.kinds.cache_clear()


def kind_names() -> list[str]:
    """Every kind this suite runs against: phalanx's own and the fake one."""
    return ["local", "ray", fakekind.NAME]


@pytest.fixture(params=kind_names())
def kind(request: pytest.FixtureRequest) -> ComputeKind:
    return registry.kind(request.param)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "home")


def request_of(kind: ComputeKind, name: str) -> TargetCreate:
    """``compute create --type KIND --name NAME`` with the kind's example options, as the
    CLI sends it."""
    return TargetCreate.model_validate(
        {"name": name, "type": kind.name, "no_check": True, **kind.example}
    )


def one_node_job(compute: str) -> JobSpec:
    return JobSpec.model_validate(
        {"command": "python -c pass", "compute": compute, "resources": {"instance_count": 1}}
    )


def test_every_kind_is_registered_under_its_own_name() -> None:
    assert set(kind_names()) <= set(registry.names())
    for name, kind in registry.kinds().items():
        assert isinstance(kind, ComputeKind) and kind.name == name
        assert issubclass(kind.settings, TargetSettings)


def test_settings_are_built_from_options_and_read_back(kind: ComputeKind) -> None:
    target = check_request(request_of(kind, "conform"))
    assert isinstance(target, kind.settings)
    assert (target.name, target.type) == ("conform", kind.name)
    stored = json.loads(target.model_dump_json(exclude_none=True))
    assert registry.load(stored) == target
    assert registry.kind_of(target) is kind


def test_public_settings_are_json_and_keep_no_secret(kind: ComputeKind) -> None:
    target = kind.build({**request_of(kind, "conform").options(), "token": SecretStr("s3cr3t")})
    public = kind.public(target)
    text = json.dumps(public)
    assert public["name"] == "conform" and public["type"] == kind.name
    assert "s3cr3t" not in text


def test_capabilities_are_stated(kind: ComputeKind) -> None:
    capabilities = kind.capabilities(check_request(request_of(kind, "conform")))
    assert isinstance(capabilities, Capabilities)


def test_a_plain_name_is_no_kind_s_inline_target(kind: ComputeKind) -> None:
    """A target's name is never taken for an inline target of some kind."""
    assert kind.inline("gpu-cluster") is None and kind.inline("local") is None


def test_an_unknown_kind_is_one_line_naming_the_known(ws: Workspace) -> None:
    with pytest.raises(PhalanxError, match=r"--type slurm: not a compute kind .*fake.*local"):
        check_request(TargetCreate(name="x", type="slurm"))


def test_a_target_is_created_described_queued_and_deleted(kind: ComputeKind, ws: Workspace) -> None:
    targets = WorkspaceTargets(ws)
    made = targets.create(request_of(kind, "conform"))
    assert made["type"] == kind.name and made["where"]
    target = get_target(ws, "conform")
    assert isinstance(target, kind.settings)
    assert [t.name for t in list_targets(ws)] == ["conform"]
    assert resolve_target("conform", ws) == target
    listed = {t["settings"]["name"]: t for t in targets.list_all()}
    assert listed["conform"]["settings"]["type"] == kind.name
    assert {"where", "placement", "nodes", "token"} <= set(listed["conform"])
    described = kind.describe(ws, target)
    assert isinstance(described, Description) and described.where
    shown = targets.show("conform")
    assert shown["target"] == "conform" and "capacity" in shown and shown["queued"] == []
    with pytest.raises(PhalanxError, match="already exists"):
        create_target(ws, target)
    delete_target(ws, "conform")
    assert list_targets(ws) == []


def test_a_one_node_job_s_request_fits(kind: ComputeKind, ws: Workspace) -> None:
    WorkspaceTargets(ws).create(request_of(kind, "conform"))
    target = get_target(ws, "conform")
    capacity = kind.capacity(ws, target)
    assert capacity is None or isinstance(capacity, Capacity)
    request = kind.request(one_node_job("conform"), target, capacity)
    assert isinstance(request, Request) and request.nodes == 1
    kind.admit(ws, target, tier=3)  # a standard job is welcome on a dedicated target


def test_a_job_larger_than_the_kind_ever_is_refused(kind: ComputeKind, ws: Workspace) -> None:
    WorkspaceTargets(ws).create(request_of(kind, "conform"))
    target = get_target(ws, "conform")
    huge = JobSpec.model_validate(
        {"command": "python -c pass", "compute": "conform",
         "resources": {"instance_count": 5000}}
    )  # fmt: skip
    with pytest.raises(PhalanxError, match="instance_count"):
        kind.request(huge, target, kind.capacity(ws, target))


def test_a_built_in_target_s_name_is_its_kind_s(ws: Workspace) -> None:
    """``local`` is the local kind's own target: no other kind may take the name."""
    others = [registry.kind(n) for n in kind_names() if registry.kind(n).builtin != "local"]
    assert others
    for kind in others:
        target = kind.build({**request_of(kind, "x").options(), "name": "local"})
        with pytest.raises(PhalanxError, match="invalid or reserved"):
            create_target(ws, target)


def test_no_code_outside_a_kind_s_package_asks_which_kind_a_target_is() -> None:
    """Only a kind's own package imports it or names its settings class: everything
    else goes through the registry (what keeps a new kind to its own files)."""
    import ast

    import phalanx

    root = Path(phalanx.__file__).parent
    kinds_root = root / "kinds"
    own = {cls.__name__ for cls in (k.settings for k in registry.kinds().values())}
    found = []
    for path in sorted(root.rglob("*.py")):
        if kinds_root in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("phalanx.kinds"):
                found.append(f"{path.relative_to(root)}:{node.lineno} imports {node.module}")
            elif isinstance(node, ast.Import):
                found += [
                    f"{path.relative_to(root)}:{node.lineno} imports {a.name}"
                    for a in node.names
                    if a.name.startswith("phalanx.kinds")
                ]
            elif isinstance(node, ast.Name | ast.Attribute):
                name = node.id if isinstance(node, ast.Name) else node.attr
                if name in own:
                    found.append(f"{path.relative_to(root)}:{node.lineno} names {name}")
    assert not found, found
