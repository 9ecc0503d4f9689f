"""From what a user writes to a :class:`Location`.

Accepted forms:

- ``azureml://datastores/<name>/paths/<path>``: a path on a named datastore;
- ``azureml:<asset>:<version>``, ``azureml:<asset>@latest``: a data asset;
- ``az://<container>/<path>``, ``abfs[s]://`` or ``wasb[s]://<container>@<account>…/<path>``
  and ``https://<account>.blob.core.windows.net/<container>/<path>``: Azure Blob with
  adlfs's own credentials from the environment (``AZURE_STORAGE_CONNECTION_STRING``,
  ``AZURE_STORAGE_ACCOUNT_NAME`` + ``AZURE_STORAGE_ACCOUNT_KEY`` / ``…_SAS_TOKEN``),
  anonymous otherwise;
- ``s3://<bucket>/<path>``: S3 with the AWS SDK's credential chain (``AWS_ENDPOINT_URL``
  for another endpoint);
- ``file:///abs/path`` or a local path.
"""

from __future__ import annotations

import os
import re
from typing import Protocol
from urllib.parse import urlsplit

from phalanx.errors import PhalanxError
from phalanx.storage.datastore_records import get_datastore, secrets_of
from phalanx.storage.location import Location, local
from phalanx.workspace import Workspace

DATASTORE_URI = re.compile(r"^azureml://datastores/(?P<name>[^/]+)/paths/?(?P<path>.*)$")
ASSET_URI = re.compile(
    r"^azureml:(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?::(?P<version>[^:@/]+)|@(?P<label>latest))$"
)
_BLOB_HOST = re.compile(r"^(?P<account>[a-z0-9]+)\.blob\.(?P<suffix>.+)$")


class Names(Protocol):
    """Where datastore and asset names are looked up other than a workspace: a job's own
    file of the datastores its spec names (:mod:`phalanx.storage.jobstores`)."""

    def location(self, datastore: str, path: str) -> Location:
        """``path`` on the datastore called ``datastore``."""
        ...

    def asset_path(self, name: str, version: str) -> str:
        """The path data asset ``name`` (``version``, or ``latest``) points at."""
        ...


def is_uri(text: str) -> bool:
    """Whether ``text`` is a URI phalanx resolves, rather than a local path."""
    return text.startswith("azureml:") or ("://" in text and not text.startswith("file://"))


def resolve(uri: str, ws: Workspace | Names) -> Location:
    """The location ``uri`` names, datastore and asset names looked up in ``ws``.

    Raises:
        PhalanxError: an unknown datastore or asset, or a scheme phalanx cannot read.
    """
    parts = urlsplit(uri)
    if parts.query:
        # A SAS token in a URL would be kept in specs and records in clear text.
        raise PhalanxError(
            f"{parts.scheme}://{parts.netloc}{parts.path}: a URL with a query string (a SAS "
            "token?) is not accepted; register a datastore with `phalanx datastore create "
            "--auth sas_token --credential-env VAR` and use azureml://datastores/<name>/paths/…"
        )
    if ".." in parts.path.split("/"):
        raise PhalanxError(f"{uri!r}: '..' is not allowed in a datastore path; write it out")
    if match := DATASTORE_URI.match(uri):
        if not isinstance(ws, Workspace):
            return ws.location(match["name"], match["path"])
        datastore = get_datastore(ws, match["name"])
        return datastore.location(match["path"], secrets_of(ws))
    if match := ASSET_URI.match(uri):
        if not isinstance(ws, Workspace):
            return resolve(ws.asset_path(match["name"], match["version"] or "latest"), ws)
        from phalanx.storage.assets import get_asset

        asset = get_asset(ws, match["name"], match["version"] or "latest")
        return resolve(asset.path, ws)
    if uri.startswith("azureml:"):
        raise PhalanxError(
            f"{uri!r} is not a datastore path or data asset; write "
            "azureml://datastores/<name>/paths/<path>, azureml:<asset>:<version> or "
            "azureml:<asset>@latest"
        )
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        return local(parts.path if scheme else uri)
    if scheme in ("az", "abfs", "abfss", "wasb", "wasbs"):
        return _azure(parts.netloc, parts.path, uri)
    if scheme == "https" and (host := _BLOB_HOST.match(parts.hostname or "")):
        container, _, path = parts.path.lstrip("/").partition("/")
        return _azure(f"{container}@{host['account']}", path, uri)
    if scheme in ("s3", "s3a"):
        return _s3(parts.netloc, parts.path)
    raise PhalanxError(
        f"{uri!r}: scheme {scheme!r} is not supported; use a datastore "
        "(azureml://datastores/<name>/paths/<path>), az://, abfs://, s3:// or a local path"
    )


def _azure(netloc: str, path: str, uri: str) -> Location:
    try:
        from adlfs import AzureBlobFileSystem
    except ImportError as exc:
        raise PhalanxError(f"{uri!r} needs Azure support: pip install 'phalanx[azure]'") from exc
    container, _, host = netloc.partition("@")
    account = host.split(".")[0] if host else os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
    if not account and not os.environ.get("AZURE_STORAGE_CONNECTION_STRING"):
        raise PhalanxError(
            f"{uri!r}: no storage account; write "
            "abfs://<container>@<account>.dfs.core.windows.net/…, set "
            "AZURE_STORAGE_ACCOUNT_NAME, or register a datastore"
        )
    fs = AzureBlobFileSystem(account_name=account) if account else AzureBlobFileSystem()
    fs_path = f"{container}/{path.strip('/')}".rstrip("/")
    name = account or getattr(fs, "account_name", None) or "account"
    return Location(fs, fs_path, f"az://{name}/{fs_path}")


def _s3(bucket: str, path: str) -> Location:
    try:
        from s3fs import S3FileSystem
    except ImportError as exc:
        raise PhalanxError("s3:// paths need S3 support: pip install 'phalanx[s3]'") from exc
    fs_path = f"{bucket}/{path.strip('/')}".rstrip("/")
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    base = endpoint.rstrip("/") if endpoint else "s3:/"
    fs = S3FileSystem(endpoint_url=endpoint) if endpoint else S3FileSystem()
    return Location(fs, fs_path, f"{base}/{fs_path}")
