"""The identities a job may run as, as Azure ML's SDK names them.

phalanx records a job's ``identity`` (the YAML's ``identity:`` block) and runs
every job as the user who started the workspace or server; these classes give
the block Azure ML's shape (``command(identity=UserIdentityConfiguration())``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx.ml.errors import checked_keywords


@checked_keywords
@dataclass(kw_only=True)
class UserIdentityConfiguration:
    """Run as the user who submits the job (``identity: {type: user_identity}``)."""

    def _to_dict(self) -> dict[str, Any]:
        return {"type": "user_identity"}


@checked_keywords
@dataclass(kw_only=True)
class ManagedIdentityConfiguration:
    """An Azure managed identity (``identity: {type: managed_identity, client_id: …}``)."""

    client_id: str | None = None
    object_id: str | None = None
    msi_resource_id: str | None = None
    resource_id: str | None = None
    principal_id: str | None = None

    def _to_dict(self) -> dict[str, Any]:
        ids = {k: v for k, v in vars(self).items() if v is not None}
        return {"type": "managed_identity", **ids}


@checked_keywords
@dataclass(kw_only=True)
class AmlTokenConfiguration:
    """Azure ML's token for the job (``identity: {type: aml_token}``)."""

    def _to_dict(self) -> dict[str, Any]:
        return {"type": "aml_token"}


Identity = UserIdentityConfiguration | ManagedIdentityConfiguration | AmlTokenConfiguration
"""What ``command(identity=...)`` takes, besides a dict with ``type``."""
IDENTITIES = (UserIdentityConfiguration, ManagedIdentityConfiguration, AmlTokenConfiguration)
