"""Datastores: named places where data lives, and the fsspec file system for each.

Three types, after Azure ML's datastore kinds:

``local``
    A folder on this machine's (or a shared) file system. The workspace's
    ``default`` datastore is ``$PHALANX_HOME/datastore``, always present.
``azure_blob``
    A container in an Azure Storage account, through adlfs. ``endpoint`` is the
    Blob service URL: ``https://<account>.blob.core.windows.net`` unless given
    (Azurite, sovereign clouds, private endpoints). Authentication: account
    key, SAS token, connection string, or anonymous (public container).
``s3``
    A bucket on S3 or any S3-compatible store (``endpoint_url``), through s3fs.
    Authentication: access key + secret, anonymous, or the AWS SDK's own chain
    (environment, profile, instance role) when no credential is named.

Credentials are :class:`~phalanx.storage.secrets.SecretRef` references, never
values; cloud SDKs are imported only when a datastore of their type is opened.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from phalanx.errors import PhalanxError
from phalanx.storage.location import Location
from phalanx.storage.secrets import SecretRef, SecretStore, resolve
from phalanx.workspace.names import NAME_RE

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

DEFAULT_DATASTORE = "default"

# The credential kinds of each type, in the order `datastore show` lists them.
AZURE_CREDENTIALS = ("account_key", "sas_token", "connection_string")
S3_CREDENTIALS = ("key", "secret")


class _Datastore(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        if not NAME_RE.fullmatch(value):
            raise ValueError("use letters, digits, '_' and '-', starting with a letter or digit")
        return value


class LocalDatastore(_Datastore):
    type: Literal["local"] = "local"
    path: str
    """Absolute folder."""

    def location(self, path: str, secrets: SecretStore) -> Location:
        """``path`` inside the folder; never outside it, by ``..`` or by a link.

        Raises:
            PhalanxError: the path climbs out of the folder.
        """
        from fsspec.implementations.local import LocalFileSystem

        relative = path.lstrip("/")
        full = str(Path(self.path, relative))
        root = os.path.realpath(self.path)
        real = os.path.realpath(full)
        if ".." in relative.split("/") or (real != root and not real.startswith(root + os.sep)):
            raise PhalanxError(
                f"datastore {self.name!r}: {path!r} leads outside its folder {self.path} "
                "('..' or a link); name a path inside it"
            )
        return Location(LocalFileSystem(), full, f"file://{full}")


class AzureBlobDatastore(_Datastore):
    type: Literal["azure_blob"] = "azure_blob"
    account_name: str
    container_name: str
    endpoint: str = "core.windows.net"
    """The storage suffix, as in Azure ML (``core.windows.net``, ``core.chinacloudapi.cn``),
    or the whole Blob service URL (``http://127.0.0.1:10000/devstoreaccount1`` for Azurite)."""
    protocol: Literal["https", "http"] = "https"
    credentials: dict[str, SecretRef] = Field(default_factory=dict)
    """At most one of ``account_key``, ``sas_token``, ``connection_string``; none = anonymous."""

    @field_validator("credentials")
    @classmethod
    def _one_credential(cls, value: dict[str, SecretRef]) -> dict[str, SecretRef]:
        unknown = set(value) - set(AZURE_CREDENTIALS)
        if unknown or len(value) > 1:
            raise ValueError(f"give at most one of {', '.join(AZURE_CREDENTIALS)}")
        return value

    @property
    def service_url(self) -> str:
        if "://" in self.endpoint:
            return self.endpoint.rstrip("/")
        return f"{self.protocol}://{self.account_name}.blob.{self.endpoint.strip('.')}"

    def filesystem(self, secrets: SecretStore) -> AbstractFileSystem:
        import importlib.util

        if importlib.util.find_spec("adlfs") is None:
            raise PhalanxError(
                f"datastore {self.name!r} needs Azure support: pip install 'phalanx[azure]'"
            )
        what = f"datastore {self.name!r}"
        if "connection_string" in self.credentials:
            conn = resolve(self.credentials["connection_string"], secrets, what)
            return _azure_filesystem(conn, what)
        # Always through a connection string, so a custom (http) endpoint works too:
        # adlfs's account_host assumes https.
        parts = [f"BlobEndpoint={self.service_url}", f"AccountName={self.account_name}"]
        if "account_key" in self.credentials:
            key = resolve(self.credentials["account_key"], secrets, f"{what}: account_key")
            parts.append(f"AccountKey={key}")
        elif "sas_token" in self.credentials:
            sas = resolve(self.credentials["sas_token"], secrets, f"{what}: sas_token")
            parts.append(f"SharedAccessSignature={check_sas(sas, what)}")
        return _azure_filesystem(";".join(parts) + ";", what)

    def location(self, path: str, secrets: SecretStore) -> Location:
        path = path.strip("/")
        fs_path = f"{self.container_name}/{path}".rstrip("/")
        url = f"{self.service_url}/{self.container_name}/{path}".rstrip("/")
        return Location(self.filesystem(secrets), fs_path, url)


# A SAS token is the query of a SAS URL: `name=value` pairs of URL characters joined
# by `&`, percent-escapes of two hex digits, one of them the signature `sig`.
_SAS_PAIR_RE = re.compile(r"[A-Za-z0-9_.~-]+=(?:[A-Za-z0-9_.~+/:,=-]|%[0-9A-Fa-f]{2})*")


def check_sas(value: str, what: str) -> str:
    """A SAS token as a connection string takes it (no leading ``?``).

    Anything else is refused here: the Azure SDK takes a malformed one into a
    connection string it cannot read (a bare error) or retries a request the
    service refuses for over a minute.

    Raises:
        PhalanxError: naming the datastore; the value itself is never shown.
    """
    token = value.strip().lstrip("?")
    pairs = token.split("&")
    if not token or not all(_SAS_PAIR_RE.fullmatch(pair) for pair in pairs):
        reason = "it is not name=value pairs of URL characters joined by '&'"
    elif not any(pair.startswith("sig=") for pair in pairs):
        reason = "it has no signature (sig=…)"
    else:
        return token
    raise PhalanxError(
        f"{what}: sas_token is not a SAS token ({reason}); give the query of a SAS URL, "
        "e.g. sv=…&sp=rl&sig=… (`az storage container generate-sas` makes one)"
    )


def _azure_filesystem(connection_string: str, what: str) -> AbstractFileSystem:
    """adlfs's file system for ``connection_string``; a malformed one is the user's error."""
    from adlfs import AzureBlobFileSystem

    try:
        return AzureBlobFileSystem(connection_string=connection_string)
    except ValueError as exc:  # adlfs: "unable to connect to account for ..." (no secret in it)
        raise PhalanxError(
            f"{what}: the Azure credentials cannot be used ({exc}); check the account name, "
            "endpoint and credential"
        ) from None


class S3Datastore(_Datastore):
    type: Literal["s3"] = "s3"
    bucket: str
    endpoint_url: str | None = None
    """An S3-compatible endpoint (MinIO, Ceph, …); AWS when absent."""
    region: str | None = None
    anonymous: bool = False
    credentials: dict[str, SecretRef] = Field(default_factory=dict)
    """``key`` and ``secret`` together; none = the AWS SDK's own credential chain."""

    @field_validator("credentials")
    @classmethod
    def _pair(cls, value: dict[str, SecretRef]) -> dict[str, SecretRef]:
        if value and set(value) != set(S3_CREDENTIALS):
            raise ValueError("give both `key` and `secret`, or neither")
        return value

    def filesystem(self, secrets: SecretStore) -> AbstractFileSystem:
        try:
            from s3fs import S3FileSystem
        except ImportError as exc:
            raise PhalanxError(
                f"datastore {self.name!r} needs S3 support: pip install 'phalanx[s3]'"
            ) from exc
        what = f"datastore {self.name!r}"
        kwargs: dict[str, object] = {"anon": self.anonymous}
        if self.endpoint_url:
            kwargs["endpoint_url"] = self.endpoint_url
        if self.region:
            kwargs["client_kwargs"] = {"region_name": self.region}
        if self.credentials:
            kwargs["key"] = resolve(self.credentials["key"], secrets, f"{what}: key")
            kwargs["secret"] = resolve(self.credentials["secret"], secrets, f"{what}: secret")
        return S3FileSystem(**kwargs)

    def location(self, path: str, secrets: SecretStore) -> Location:
        path = path.strip("/")
        fs_path = f"{self.bucket}/{path}".rstrip("/")
        base = self.endpoint_url.rstrip("/") if self.endpoint_url else "s3:/"
        return Location(self.filesystem(secrets), fs_path, f"{base}/{fs_path}")


Datastore = Annotated[
    LocalDatastore | AzureBlobDatastore | S3Datastore, Field(discriminator="type")
]
DATASTORE_ADAPTER: TypeAdapter[Datastore] = TypeAdapter(Datastore)


def default_datastore(home: Path) -> LocalDatastore:
    """The workspace's built-in datastore: ``$PHALANX_HOME/datastore``."""
    return LocalDatastore(
        name=DEFAULT_DATASTORE,
        path=str(home / "datastore"),
        description="the workspace's own folder",
    )
