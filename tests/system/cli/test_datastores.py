"""Datastores and data assets through the CLI, against real Azurite and a real S3 server."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from unittest import mock

import pytest

from conftest import LOCAL_AND_SERVER, Cli
from phalanx.storage.uri import resolve
from phalanx.workspace import Workspace
from servers import AZURITE_ACCOUNT, AZURITE_KEY, Azurite, S3Server


def _container(azurite: Azurite, public: bool = False) -> str:
    name = f"c{uuid.uuid4().hex[:12]}"
    azurite.container(name, public=public)
    azurite.upload(name, {"data/a.txt": b"alpha", "data/sub/b.txt": b"beta"})
    return name


def _azure_args(azurite: Azurite, name: str, container: str, *auth: str) -> list[str]:
    return [
        "datastore", "create", "--name", name, "--type", "azure_blob",
        "--account-name", AZURITE_ACCOUNT, "--container-name", container,
        "--endpoint", azurite.endpoint, *auth,
    ]  # fmt: skip


def _read(cli: Cli, uri: str, below: str = "") -> bytes:
    """Read through phalanx.storage in this process, with the CLI's environment."""
    with mock.patch.dict(os.environ, cli.env, clear=True):
        ws = Workspace(cli.home)
        try:
            loc = resolve(uri, ws)
            loc = loc.child(below) if below else loc
            return bytes(loc.fs.cat_file(loc.path))
        finally:
            ws.close()


def _no_secret_anywhere(cli: Cli, secret: str) -> None:
    """The value is nowhere but the secrets file: not the database, not `show`, not `list`."""
    for path in cli.home.rglob("*"):
        if path.is_file() and path.name != "secrets.json":
            assert secret.encode() not in path.read_bytes(), path
    shown = cli.run("datastore", "list", "--json", check=True).stdout
    assert secret not in shown


@LOCAL_AND_SERVER
def test_default_and_local_datastores(cli: Cli, tmp_path: Path) -> None:
    listed = json.loads(cli.run("datastore", "list", "--json", check=True).stdout)
    assert [d["name"] for d in listed] == ["default"]
    assert listed[0]["path"] == str(cli.home / "datastore")

    folder = tmp_path / "shared"
    (folder / "x").mkdir(parents=True)
    (folder / "x" / "f.bin").write_bytes(b"local bytes")
    cli.run("datastore", "create", "--name", "nfs", "--type", "local", "--path", str(folder),
            check=True)  # fmt: skip
    assert _read(cli, "azureml://datastores/nfs/paths/x/f.bin") == b"local bytes"

    again = cli.run("datastore", "create", "--name", "nfs", "--type", "local", "--path",
                    str(folder / "x"))  # fmt: skip
    assert again.returncode == 2 and "already exists" in again.stderr
    nowhere = tmp_path / "nope" / "x"
    gone = cli.run("datastore", "create", "--name", "x", "--type", "local", "--path", str(nowhere))
    assert gone.returncode == 2 and f"{nowhere} not found" in gone.stderr
    builtin = cli.run("datastore", "delete", "default")
    assert builtin.returncode == 2 and "built in" in builtin.stderr
    cli.run("datastore", "delete", "nfs", check=True)
    missing = cli.run("datastore", "show", "nfs")
    assert missing.returncode == 2 and "not found" in missing.stderr
    assert "Traceback" not in missing.stderr + gone.stderr + again.stderr


@LOCAL_AND_SERVER
def test_azure_account_key_from_env(cli: Cli, azurite: Azurite) -> None:
    container = _container(azurite)
    cli.export(MY_AZ_KEY=AZURITE_KEY)
    args = _azure_args(azurite, "blobs", container, "--credential-env", "MY_AZ_KEY")
    cli.run(*args, check=True)
    shown = json.loads(cli.run("datastore", "show", "blobs", "--json", check=True).stdout)
    assert shown["credentials"] == {"account_key": "environment variable MY_AZ_KEY"}
    top = json.loads(cli.run("datastore", "ls", "blobs", "--json", check=True).stdout)
    assert top == [{"name": "data", "type": "folder", "size": 0}]
    below = json.loads(cli.run("datastore", "ls", "blobs", "data", "--json", check=True).stdout)
    assert below == [
        {"name": "sub", "type": "folder", "size": 0},
        {"name": "a.txt", "type": "file", "size": 5},
    ]
    missing = cli.run("datastore", "ls", "blobs", "nothing")
    assert missing.returncode == 2 and "not found" in missing.stderr
    assert _read(cli, "azureml://datastores/blobs/paths/data/sub/b.txt") == b"beta"
    _no_secret_anywhere(cli, AZURITE_KEY)
    assert not (cli.home / "secrets.json").exists()


@LOCAL_AND_SERVER
def test_azure_stored_key_is_0600_and_deleted_with_datastore(cli: Cli, azurite: Azurite) -> None:
    container = _container(azurite)
    args = _azure_args(azurite, "blobs", container, "--auth", "account_key", "--store")
    proc = cli.run_input(AZURITE_KEY + "\n", *args)
    assert proc.returncode == 0, proc.stderr
    secrets = cli.home / "secrets.json"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert AZURITE_KEY in secrets.read_text()
    shown = cli.run("datastore", "show", "blobs", check=True).stdout
    assert "stored in the secrets file" in shown and AZURITE_KEY not in shown
    _no_secret_anywhere(cli, AZURITE_KEY)
    # The credential is read from the file, not the environment.
    assert _read(cli, "azureml://datastores/blobs/paths/data/a.txt") == b"alpha"
    cli.run("datastore", "delete", "blobs", check=True)
    assert AZURITE_KEY not in secrets.read_text()


@LOCAL_AND_SERVER
def test_azure_wrong_key_is_refused_and_nothing_kept(cli: Cli, azurite: Azurite) -> None:
    container = _container(azurite)
    wrong = "A" * 8 + AZURITE_KEY[8:]
    args = _azure_args(azurite, "blobs", container, "--auth", "account_key", "--store")
    proc = cli.run_input(wrong + "\n", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "access denied" in proc.stderr
    assert "Traceback" not in proc.stderr and wrong not in proc.stderr
    listed = json.loads(cli.run("datastore", "list", "--json", check=True).stdout)
    assert [d["name"] for d in listed] == ["default"]
    secrets = cli.home / "secrets.json"
    assert not secrets.exists() or wrong not in secrets.read_text()


@LOCAL_AND_SERVER
def test_malformed_key_and_taken_name_keep_the_old_credential(cli: Cli, azurite: Azurite) -> None:
    container = _container(azurite)
    args = _azure_args(azurite, "blobs", container, "--auth", "account_key", "--store")
    assert cli.run_input(AZURITE_KEY + "\n", *args).returncode == 0
    # The same name again: refused before anything is written or undone.
    again = cli.run_input("A" * 88 + "\n", *args)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert AZURITE_KEY in (cli.home / "secrets.json").read_text()
    assert _read(cli, "azureml://datastores/blobs/paths/data/a.txt") == b"alpha"
    # A key that is not even base64 (a SAS pasted as a key): one line, not a traceback.
    bad = _azure_args(azurite, "bad", container, "--auth", "account_key", "--store")
    proc = cli.run_input("sv=2024&sig=abc\n", *bad)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "access denied" in proc.stderr and "sig=abc" not in proc.stderr


@LOCAL_AND_SERVER
def test_urls_with_a_query_or_dotdot_are_refused(cli: Cli) -> None:
    sas_url = "https://acct.blob.core.windows.net/c/data?sv=2024&sig=SECRET"
    proc = cli.run("data", "create", "--name", "x", "--path", sas_url)
    assert proc.returncode == 2 and "query string" in proc.stderr
    assert "SECRET" not in proc.stderr
    up = cli.run(
        "data", "create", "--name", "x", "--path", "azureml://datastores/default/paths/../.."
    )
    assert up.returncode == 2 and "'..' is not allowed" in up.stderr


@LOCAL_AND_SERVER
def test_azure_sas_token(cli: Cli, azurite: Azurite) -> None:
    container = _container(azurite)
    sas = azurite.sas(container, "rl")
    cli.export(MY_SAS=sas)
    args = _azure_args(azurite, "sas", container, "--auth", "sas_token", "--credential-env",
                       "MY_SAS")  # fmt: skip
    cli.run(*args, check=True)
    assert _read(cli, "azureml://datastores/sas/paths/data/a.txt") == b"alpha"
    _no_secret_anywhere(cli, sas)
    # A token for another container does not open this one.
    other = _container(azurite)
    cli.export(OTHER_SAS=azurite.sas(other, "rl"))
    denied = cli.run(*_azure_args(azurite, "sas2", container, "--auth", "sas_token",
                                  "--credential-env", "OTHER_SAS"))  # fmt: skip
    assert denied.returncode == 2 and "access denied" in denied.stderr


@LOCAL_AND_SERVER
def test_azure_anonymous_public_container(cli: Cli, azurite: Azurite) -> None:
    public = _container(azurite, public=True)
    cli.run(*_azure_args(azurite, "pub", public), check=True)
    assert _read(cli, "azureml://datastores/pub/paths/data/a.txt") == b"alpha"
    private = _container(azurite)
    denied = cli.run(*_azure_args(azurite, "priv", private))
    assert denied.returncode == 2 and "access denied" in denied.stderr


@LOCAL_AND_SERVER
def test_unreachable_endpoint_fails_fast(cli: Cli, azurite: Azurite) -> None:
    from phalanx.launch.ports import free_port

    args = _azure_args(azurite, "x", "cont", "--auth", "anonymous")
    args[args.index("--endpoint") + 1] = f"http://127.0.0.1:{free_port()}/{AZURITE_ACCOUNT}"
    proc = cli.run(*args, timeout=30)
    assert proc.returncode == 2 and "cannot reach" in proc.stderr


@LOCAL_AND_SERVER
def test_missing_credential_variable_is_named(cli: Cli, azurite: Azurite) -> None:
    container = _container(azurite)
    cli.export(MY_AZ_KEY=AZURITE_KEY)
    cli.run(*_azure_args(azurite, "blobs", container, "--credential-env", "MY_AZ_KEY"),
            check=True)  # fmt: skip
    cli.unexport("MY_AZ_KEY")
    proc = cli.run("data", "create", "--name", "d", "--path",
                   "azureml://datastores/blobs/paths/data")  # fmt: skip
    # Through a server the variable is the server's, and the message says so.
    where = " on the server" if cli.server is not None else ""
    assert proc.returncode == 2 and f"MY_AZ_KEY is not set{where};" in proc.stderr


@LOCAL_AND_SERVER
def test_s3_datastore_with_keys(cli: Cli, s3_server: S3Server) -> None:
    bucket = f"b{uuid.uuid4().hex[:12]}"
    s3_server.bucket(bucket, {"data/a.txt": b"from s3"})
    cli.export(KEY_ID=s3_server.key, KEY_SECRET=s3_server.secret)
    cli.run("datastore", "create", "--name", "s3", "--type", "s3", "--bucket", bucket,
            "--endpoint-url", s3_server.endpoint, "--key-env", "KEY_ID", "--secret-env",
            "KEY_SECRET", check=True)  # fmt: skip
    assert _read(cli, "azureml://datastores/s3/paths/data/a.txt") == b"from s3"
    _no_secret_anywhere(cli, s3_server.secret)


@LOCAL_AND_SERVER
def test_data_assets_versions_and_latest(cli: Cli, tmp_path: Path, azurite: Azurite) -> None:
    container = _container(azurite)
    cli.export(MY_AZ_KEY=AZURITE_KEY)
    cli.run(*_azure_args(azurite, "blobs", container, "--credential-env", "MY_AZ_KEY"),
            check=True)  # fmt: skip
    uri = "azureml://datastores/blobs/paths/data"
    cli.run("data", "create", "--name", "imgs", "--path", uri, check=True)
    folder = tmp_path / "local-data"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"local alpha")
    cli.run("data", "create", "--name", "imgs", "--path", str(folder), check=True)
    listed = json.loads(cli.run("data", "list", "--json", check=True).stdout)
    assert [(a["name"], a["version"]) for a in listed] == [("imgs", "1"), ("imgs", "2")]
    assert _read(cli, "azureml:imgs:1", "a.txt") == b"alpha"
    assert _read(cli, "azureml:imgs@latest", "a.txt") == b"local alpha"
    taken = cli.run("data", "create", "--name", "imgs", "--version", "1", "--path", uri)
    assert taken.returncode == 2 and "immutable" in taken.stderr
    shown = json.loads(cli.run("data", "show", "imgs:1", "--json", check=True).stdout)
    assert shown["path"] == uri and shown["uri"] == "azureml:imgs:1"
    wrong_type = cli.run("data", "create", "--name", "f", "--type", "uri_file", "--path", uri)
    assert wrong_type.returncode == 2 and "wants a file" in wrong_type.stderr
    missing = cli.run("data", "create", "--name", "m", "--path", f"{uri}/nothing-here")
    assert missing.returncode == 2 and "not found" in missing.stderr
    unknown = cli.run("data", "show", "nope")
    assert unknown.returncode == 2 and "not found" in unknown.stderr


@pytest.mark.parametrize(
    "uri, message",
    [
        ("azureml://datastores/nope/paths/x", "datastore 'nope' not found"),
        ("azureml:thing", "not a datastore path or data asset"),
        ("ftp://host/x", "scheme 'ftp' is not supported"),
    ],
)
@LOCAL_AND_SERVER
def test_bad_uris(cli: Cli, uri: str, message: str) -> None:
    proc = cli.run("data", "create", "--name", "x", "--path", uri)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "uri",
    [
        "wasbs://data@myacct.blob.core.windows.net/imagenet/train",
        "abfss://data@myacct.dfs.core.windows.net/imagenet/train",
        "https://myacct.blob.core.windows.net/data/imagenet/train",
    ],
)
def test_azure_url_forms_name_the_same_blob(uri: str) -> None:
    """Plain Azure URLs resolve without a workspace (no network until read)."""
    loc = resolve(uri, None)  # type: ignore[arg-type]
    assert (loc.url, loc.path) == ("az://myacct/data/imagenet/train", "data/imagenet/train")
