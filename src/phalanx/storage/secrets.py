"""Credentials kept outside job specs and the database.

A datastore's credential is either *referenced* (the name of an environment
variable read when the datastore is used) or *stored* in the workspace's
secrets file, ``$PHALANX_HOME/secrets.json``, readable by its owner only
(0600). The database and ``datastore show`` hold the reference, never the
value.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, model_validator

from phalanx.errors import PhalanxError, UnsetVariableError
from phalanx.storage.redact import remember

SECRETS_FILE = "secrets.json"


class SecretRef(BaseModel):
    """Where a credential's value is found: an environment variable or the secrets file."""

    model_config = ConfigDict(extra="forbid")

    env: str | None = None
    """Name of an environment variable read each time the credential is needed."""
    secret: str | None = None
    """Key of the value in the workspace's secrets file."""

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.secret is None):
            raise ValueError("a credential names exactly one of `env` or `secret`")
        return self

    @property
    def where(self) -> str:
        """How ``datastore show`` describes it (never the value)."""
        return f"environment variable {self.env}" if self.env else "stored in the secrets file"


class SecretStore:
    """The workspace's secrets file.

    Args:
        home: The workspace folder.
    """

    def __init__(self, home: Path) -> None:
        self.path = home / SECRETS_FILE
        self._lock = FileLock(str(home / f".{SECRETS_FILE}.lock"))

    def _read(self) -> dict[str, str]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PhalanxError(
                f"{self.path} is not valid JSON ({exc.msg}); restore it or remove it and store "
                "the datastores' credentials again"
            ) from exc
        if not isinstance(data, dict):
            raise PhalanxError(f"{self.path} must hold a JSON object; restore or remove it")
        return {str(k): str(v) for k, v in data.items()}

    def _write(self, data: dict[str, str]) -> None:
        # Created 0600 before any byte is written, then renamed over the old file.
        fd, tmp = tempfile.mkstemp(prefix=".secrets-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> str | None:
        return self._read().get(key)

    def put(self, key: str, value: str) -> None:
        with self._lock:
            data = self._read()
            data[key] = value
            self._write(data)

    def keys(self, prefix: str) -> list[str]:
        """The keys that start with ``prefix``, sorted (never a value)."""
        return sorted(k for k in self._read() if k.startswith(prefix))

    def delete(self, key: str) -> bool:
        """Forget the value of ``key``; whether there was one."""
        with self._lock:
            data = self._read()
            if data.pop(key, None) is None:
                return False
            self._write(data)
            return True

    def delete_prefix(self, prefix: str) -> None:
        """Forget every value whose key starts with ``prefix``."""
        with self._lock:
            data = self._read()
            kept = {k: v for k, v in data.items() if not k.startswith(prefix)}
            if kept != data:
                self._write(kept)


def resolve(ref: SecretRef, store: SecretStore, what: str) -> str:
    """The value ``ref`` points at.

    Args:
        ref: The reference.
        store: The workspace's secrets file.
        what: Names the credential in errors (``datastore 'blobs': account_key``).

    Raises:
        PhalanxError: the variable is unset or the stored value is gone.
    """
    if ref.env is not None:
        value = os.environ.get(ref.env)
        if value:
            remember(value)
        if not value:
            raise UnsetVariableError(
                what, ref.env, "export it, or store the credential with "
                "`phalanx datastore create ... --store`",
            )  # fmt: skip
        return value
    assert ref.secret is not None  # the validator guarantees one of the two
    value = store.get(ref.secret)
    if value is not None:
        remember(value)
    if value is None:
        raise PhalanxError(
            f"{what}: the stored credential is missing from {store.path}; create the datastore "
            "again with its credential"
        )
    return value
