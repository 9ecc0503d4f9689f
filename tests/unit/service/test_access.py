"""The rules of who may do what (phalanx.service.access), without a server: the
attacks through a real server are in test_tenancy.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.errors import Forbidden, PhalanxError
from phalanx.service.access import LOCAL, Caller, Role, ServerLimits, parse_role
from phalanx.service.reach import check_uri, shared

SERVER = ServerLimits(datastore_roots=(Path("/data"),))
ADMIN = Caller("root", Role.ADMIN, SERVER)
ALICE = Caller("alice", Role.MEMBER, SERVER)
VIC = Caller("vic", Role.VIEWER, SERVER)


def test_owners_and_admins_act_members_only_on_their_own() -> None:
    assert ALICE.may_act_on("alice") and not ALICE.may_act_on("bob")
    assert not ALICE.may_act_on(None)  # a record nobody owns is an admin's
    assert ADMIN.may_act_on("bob") and ADMIN.may_act_on(None) and LOCAL.may_act_on(None)
    assert not VIC.may_act_on("vic")  # a viewer acts on nothing, not even its own
    with pytest.raises(Forbidden, match="job 'x' belongs to bob; only its owner or an admin"):
        ALICE.require_owner("job cancel", "job 'x'", "bob")
    with pytest.raises(Forbidden, match="vic \\(viewer\\) may only read"):
        VIC.require_owner("job cancel", "job 'x'", "vic")
    with pytest.raises(Forbidden, match="has no owner on record"):
        ALICE.require_owner("datastore delete", "datastore 'd'", None)
    ALICE.require_owner("job cancel", "job 'x'", "alice")  # no error


def test_admin_verbs_and_their_one_line() -> None:
    with pytest.raises(Forbidden) as refused:
        ALICE.require_admin("compute create", "targets decide where everyone's jobs run")
    assert str(refused.value) == (
        "compute create: only an admin may do this (targets decide where everyone's jobs "
        "run); alice (member) is not one"
    )
    ADMIN.require_admin("compute create")
    LOCAL.require_admin("compute create")  # this machine's own user


def test_roles_by_name() -> None:
    assert parse_role("viewer") is Role.VIEWER and str(Role.ADMIN) == "admin"
    with pytest.raises(PhalanxError, match="--role 'root': choose one of admin, member, viewer"):
        parse_role("root")


@pytest.mark.parametrize(
    "uri",
    [
        "azureml://datastores/blobs/paths/imagenet/train",
        "azureml:imagenet:3",
        "azureml:imagenet@latest",
        "azureml://jobs/keen_sable/outputs/model",
    ],
)
def test_shared_names_pass_for_members(uri: str) -> None:
    assert shared(uri)
    check_uri(ALICE, uri, "--path")


@pytest.mark.parametrize(
    "uri",
    [
        "/etc/passwd",
        "file:///etc/passwd",
        "s3://bucket/key",
        "az://container@account/x",
        "abfs://c@a.dfs.core.windows.net/x",
        "https://account.blob.core.windows.net/c/x",
    ],
)
def test_server_paths_and_ambient_credentials_are_an_admins(uri: str) -> None:
    assert not shared(uri)
    with pytest.raises(Forbidden, match=r"--path: .*only an admin may do this"):
        check_uri(ALICE, uri, "--path")
    check_uri(ADMIN, uri, "--path")
    check_uri(LOCAL, uri, "--path")  # on this machine nothing is confined
