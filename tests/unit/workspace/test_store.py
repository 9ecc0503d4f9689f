"""The records other modules keep in the workspace database, in-process, on both backends.

Every test takes ``db``: it runs once on SQLite and once on a fresh PostgreSQL
database, through the same code.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError

from phalanx.compute.targets import (
    create_target,
    delete_target,
    get_target,
    list_targets,
    resolve_target,
)
from phalanx.errors import PhalanxError
from phalanx.jobs.control import fill_queue_entry
from phalanx.kinds.local.settings import LocalTarget
from phalanx.kinds.ray.settings import RayTarget
from phalanx.registry import get_model, list_models, register_model
from phalanx.scheduler import ledger
from phalanx.scheduler.model import Decision, NodeGrant
from phalanx.storage.assets import create_asset, get_asset, list_assets
from phalanx.storage.datastore_records import create_datastore, delete_datastore, get_datastore
from phalanx.storage.datastores import LocalDatastore
from phalanx.workspace import JobStatus, QueueEntry, Workspace
from phalanx.workspace.tokens import (
    create_token,
    identity_of,
    list_tokens,
    revoke_token,
    touch,
)

SPEC = {"command": "true"}
GIB = 1 << 30


@pytest.fixture
def ws(tmp_path: Path, db: str | None) -> Workspace:
    return Workspace(tmp_path / "home")


def test_tokens_are_kept_as_hashes_and_revoked(ws: Workspace) -> None:
    info, token = create_token(ws, "alice", "laptop")
    identity = identity_of(ws, token)
    assert identity is not None and (identity.user, identity.role) == ("alice", "member")
    assert identity_of(ws, token + "x") is None
    _, viewer = create_token(ws, "carol", role="viewer")
    assert getattr(identity_of(ws, viewer), "role", None) == "viewer"
    with pytest.raises(PhalanxError, match="--role 'owner': choose one of admin, member, viewer"):
        create_token(ws, "dave", role="owner")
    assert token not in str(ws.query("SELECT * FROM tokens"))
    with pytest.raises(PhalanxError, match="already exists"):
        create_token(ws, "bob", "laptop")
    touch(ws, token)
    listed = next(t for t in list_tokens(ws) if t.name == "laptop")
    assert listed.last_used_at is not None and listed.role == "member"
    assert listed.created_at == info.created_at
    revoke_token(ws, "laptop")
    assert identity_of(ws, token) is None
    with pytest.raises(PhalanxError, match="no token named"):
        revoke_token(ws, "laptop")


def test_asset_versions_count_up_and_never_change(ws: Workspace) -> None:
    assert create_asset(ws, name="images", path="/a").version == "1"
    assert create_asset(ws, name="images", path="/b", version="v2").version == "v2"
    assert create_asset(ws, name="images", path="/c").version == "2"
    with pytest.raises(PhalanxError, match="immutable"):
        create_asset(ws, name="images", path="/d", version="1")
    assert get_asset(ws, "images").path == "/c"  # latest: the newest created
    assert [a.version for a in list_assets(ws, "images")] == ["1", "v2", "2"]


def test_datastores_are_created_replaced_and_deleted(ws: Workspace, tmp_path: Path) -> None:
    create_datastore(ws, LocalDatastore(name="shared", path=str(tmp_path / "a")))
    with pytest.raises(PhalanxError, match="already exists"):
        create_datastore(ws, LocalDatastore(name="shared", path=str(tmp_path / "b")))
    create_datastore(ws, LocalDatastore(name="shared", path=str(tmp_path / "b")), replace=True)
    store = get_datastore(ws, "shared")
    assert isinstance(store, LocalDatastore) and store.path == str(tmp_path / "b")
    delete_datastore(ws, "shared")
    with pytest.raises(PhalanxError, match="not found"):
        get_datastore(ws, "shared")


def test_compute_targets_round_trip(ws: Workspace) -> None:
    create_target(ws, LocalTarget(name="team-a", gpus=("4", "5"), cpus=8, memory=256 * GIB))
    create_target(ws, RayTarget(name="cluster", address="ray://head:10001"))
    with pytest.raises(PhalanxError, match="already exists"):
        create_target(ws, RayTarget(name="cluster", address="ray://other:10001"))
    assert [t.name for t in list_targets(ws)] == ["cluster", "team-a"]
    team = get_target(ws, "team-a")
    assert isinstance(team, LocalTarget) and team.memory == 256 * GIB
    assert resolve_target("local", ws) == LocalTarget()
    delete_target(ws, "cluster")
    with pytest.raises(PhalanxError, match="not found"):
        get_target(ws, "cluster")


def test_models_get_the_next_version_and_their_files(ws: Workspace, tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.pt").write_bytes(b"abc")
    first = register_model(ws, name="net", path=str(weights))
    second = register_model(ws, name="net", path=str(weights), tags={"stage": "prod"})
    assert (first.version, second.version) == ("1", "2")
    assert get_model(ws, "net").tags == {"stage": "prod"}
    assert [f.path for f in get_model(ws, "net", "1").files] == ["model.pt"]
    with pytest.raises(PhalanxError, match="already exists"):
        register_model(ws, name="net", path=str(weights), version="2")
    assert [m.version for m in list_models(ws)] == ["1", "2"]


def test_a_decision_is_applied_once_and_devices_come_back(ws: Workspace) -> None:
    queue = QueueEntry(target="local", request={"nodes": 2, "gpus": 1, "memory": 80 * GIB})
    big = ws.create_job(SPEC, spec_text="", name="big", queue=queue).name
    small = ws.create_job(SPEC, spec_text="", name="small", queue=queue).name
    canceled = ws.create_job(SPEC, spec_text="", name="gone", queue=queue).name
    ws.request_cancel(canceled)
    assert [j.name for j in ledger.queued(ws, "local")] == [big, small]
    assert ledger.targets_with_work(ws) == ["local"]
    grant = (NodeGrant("h", ("0",), 2.0, 80 * GIB), NodeGrant("h", ("1",), 2.0, 80 * GIB))
    decision = Decision(
        admit={big: grant, canceled: grant},
        waiting={small: "waits for 2 GPUs"},
        position={small: 1},
    )
    assert ledger.apply(ws, "local", decision) == [big]  # a canceled job never starts
    assert ledger.apply(ws, "local", decision) == []  # nor does one started already
    assert ledger.grant_of(ws, big) == grant
    # No start estimate was given: unknown (None), never invented.
    assert ws.get_job(small).queue == {"position": 1, "reason": "waits for 2 GPUs", "start": None}
    [running] = ledger.holding(ws, "local")
    assert running.name == big and running.nodes[1].memory == 80 * GIB
    # Preempted for the small job: marked releasing, asked to preempt, once.
    ledger.apply(ws, "local", Decision(preempt={big: small}, leave_by={big: 2e9}))
    assert ledger.is_releasing(ws, big)
    [leaving] = ledger.holding(ws, "local")  # until its grace's end, as the estimate said
    assert leaving.releasing and leaving.ends_by == 2e9
    assert ws.requests(big) == (False, True)
    assert (ws.take_preemption_request(big) or {}).get("for") == small
    assert ws.take_preemption_request(big) is None
    ledger.set_hosts(ws, big, ["node-a", "node-b"])
    assert [g.host for g in ledger.grant_of(ws, big)] == ["node-a", "node-b"]
    ledger.release(ws, big, requeue=True)
    assert ledger.grant_of(ws, big) == () and ws.get_job(big).status is JobStatus.QUEUED


def test_a_terminal_status_frees_devices_and_ends_the_attempt(ws: Workspace) -> None:
    name = ws.create_job(SPEC, spec_text="", name="job").name
    ledger.apply(ws, "local", Decision(admit={name: (NodeGrant("h", ("0",)),)}))
    assert ws.claim_supervisor(name, 4242, lambda pid: True)
    assert not ws.claim_supervisor(name, 4343, lambda pid: True)  # a live one holds it
    assert ws.claim_supervisor(name, 4343, lambda pid: False)  # a dead one does not
    ws.set_status(name, JobStatus.RUNNING)
    attempt = ws.start_attempt(name, master_port=29400, nodes=[{"host": "h"}])
    ws.set_attempt_note(name, attempt.number, "first")
    ws.set_status(name, JobStatus.CANCELED)
    job = ws.get_job(name)
    assert ledger.grant_of(ws, name) == () and job.supervisor_pid == 4343
    assert [(a.status.value, a.note) for a in job.attempts] == [("Canceled", "first")]


def test_the_schedulers_reads_find_the_jobs_each_is_named_for(ws: Workspace) -> None:
    ws.ping()
    assert not ws.any_job_not_over()
    # A job recorded before the scheduler existed asks for nothing until it is worked out.
    old = ws.create_job(SPEC, spec_text="", name="old").name
    assert ws.any_job_not_over()
    assert ledger.unrequested(ws) == [old]
    fill_queue_entry(ws, old)
    assert ledger.unrequested(ws) == []
    ledger.fill_request(ws, old, QueueEntry(request={"nodes": 9}))  # worked out once only
    [row] = ws.query("SELECT request_json FROM jobs WHERE name = 'old'")
    assert '"nodes": 1' in row["request_json"]
    queue = QueueEntry(target="local", request={"nodes": 1})
    admitted = ws.create_job(SPEC, spec_text="", name="admitted", queue=queue).name
    waiting = ws.create_job(SPEC, spec_text="", name="waiting", queue=queue).name
    ledger.apply(ws, "local", Decision(admit={admitted: (NodeGrant("h", ("0",)),)}))
    # What a machine shared by local targets finds its other targets hold.
    [other] = ledger.holding_elsewhere(ws, "h", "other")
    assert (other.name, other.target, other.nodes[0].gpus) == (admitted, "local", ("0",))
    assert ledger.holding_elsewhere(ws, "h", "local") == []
    assert ledger.unsupervised(ws) == [admitted]  # it holds devices but no supervisor came
    assert ws.claim_supervisor(admitted, 4242, lambda pid: True)
    assert ws.claim_supervisor(waiting, 4343, lambda pid: True)
    assert ledger.unsupervised(ws) == []
    assert ledger.supervised(ws, every_queued=False) == [admitted]
    assert sorted(ledger.supervised(ws, every_queued=True)) == [admitted, waiting]
    for name in (old, admitted, waiting):
        ws.set_status(name, JobStatus.CANCELED)
    assert ledger.supervised(ws, every_queued=True) == []
    assert not ws.any_job_not_over()


def test_a_transaction_is_all_or_nothing_and_nested_ones_join_it(ws: Workspace) -> None:
    ws.create_job(SPEC, spec_text="", name="kept")
    with pytest.raises(IntegrityError), ws.transaction() as tx:
        tx.execute("UPDATE jobs SET description = 'changed' WHERE name = 'kept'")
        ws.request_cancel("kept")  # joins the outer transaction
        assert ws.requests("kept") == (True, False)  # and reads see its writes
        tx.execute(
            "INSERT INTO jobs (name, experiment_name, status, created_at, spec_json)"
            " VALUES ('kept', 'x', 'Queued', :now, '{}')",
            {"now": time.time()},
        )
    job = ws.get_job("kept")
    assert job.description is None and not job.cancel_requested


def test_a_probe_reading_replaces_the_one_before(ws: Workspace) -> None:
    ledger.record_capacity(ws, "cluster", [{"host": "a", "gpus": 1, "cpus": 4.0}])
    first = ws.query("SELECT read_at FROM capacities WHERE target = 'cluster'")[0]["read_at"]
    ledger.record_capacity(ws, "cluster", [{"host": "b", "gpus": 8, "cpus": 64.0}])
    [row] = ws.query("SELECT hosts_json, read_at FROM capacities WHERE target = 'cluster'")
    assert row["hosts_json"] == '[{"host": "b", "gpus": 8, "cpus": 64.0}]'
    assert row["read_at"] >= first
