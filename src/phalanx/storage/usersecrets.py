"""Secrets a user keeps for their jobs, and the references a spec names them by.

A token pasted into a spec's ``environment_variables`` would be kept with the spec
(its file, the database) and shown to whoever may read the spec. Instead a user
stores it once (``phalanx secret set HF_TOKEN``, the value read from stdin) and
names it in the spec::

    environment_variables:
      HF_TOKEN: ${{secrets.HF_TOKEN}}

The value lives only in the workspace's 0600 secrets file
(:mod:`phalanx.storage.secrets`), under its owner's name: each user's secrets are
their own, and a job gets those of the user who created it. It is put in place when
the job's processes start (:func:`resolve_variables`, called as the job is planned),
into their environment only: the spec, the database, ``job show`` and the job's
folder keep the reference, and the supervisor's log masks the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from phalanx.errors import PhalanxError
from phalanx.spec.interpolate import SECRET_RE
from phalanx.storage.redact import remember
from phalanx.storage.secrets import SecretStore

NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,127}")
"""A secret's name: a letter, then letters, digits, ``_`` and ``-``; at most 128."""
REFERENCE_RE = SECRET_RE
"""A reference to a secret in an environment variable's value: ``${{secrets.NAME}}``."""
MAX_VALUE = 64 * 1024
"""Characters a secret's value may hold (an environment variable is no file)."""
_LOCAL = "-"
"""The owner of this machine's own user's secrets (jobs made without a server)."""


def check_name(name: str) -> str:
    """``name`` if it is a valid secret name.

    Raises:
        PhalanxError: naming the rule.
    """
    if not NAME_RE.fullmatch(name):
        shown = name if len(name) <= 100 else name[:100] + "…"
        raise PhalanxError(
            f"secret name {shown!r}: start with a letter, then use letters, digits, '_' "
            "and '-' (at most 128 characters)"
        )
    return name


def check_value(value: str) -> str:
    """``value`` if an environment variable can hold it.

    Raises:
        PhalanxError: empty, too long, or holding a NUL character.
    """
    if not value:
        raise PhalanxError("the secret's value is empty; pipe it in on stdin")
    if len(value) > MAX_VALUE:
        raise PhalanxError(f"the secret's value is longer than {MAX_VALUE} characters")
    if "\0" in value:
        raise PhalanxError("the secret's value holds a NUL character, which no variable can")
    return value


def _prefix(owner: str | None) -> str:
    return f"user/{owner or _LOCAL}/"


def references(value: str) -> list[str]:
    """The names of the secrets ``value`` refers to."""
    return REFERENCE_RE.findall(value)


def is_reference(value: str) -> bool:
    """Whether ``value`` holds nothing but secret references (and blanks)."""
    return bool(references(value)) and not REFERENCE_RE.sub("", value).strip()


class UserSecrets:
    """One user's secrets in the workspace's secrets file.

    Args:
        store: The secrets file.
        owner: The server's user; ``None`` for this machine's own user.
    """

    def __init__(self, store: SecretStore, owner: str | None) -> None:
        self.store, self.owner = store, owner

    def names(self) -> list[str]:
        prefix = _prefix(self.owner)
        return [k[len(prefix) :] for k in self.store.keys(prefix) if "/" not in k[len(prefix) :]]

    def set(self, name: str, value: str) -> None:
        self.store.put(_prefix(self.owner) + check_name(name), check_value(value))

    def delete(self, name: str) -> bool:
        return self.store.delete(_prefix(self.owner) + check_name(name))

    def get(self, name: str) -> str | None:
        return self.store.get(_prefix(self.owner) + name)

    def missing(self, variables: Mapping[str, str]) -> list[tuple[str, str]]:
        """(variable, secret) for each reference in ``variables`` to a secret not set."""
        known = set(self.names())
        return [
            (key, name)
            for key, value in variables.items()
            for name in references(value)
            if name not in known
        ]


def missing_message(owner: str | None, name: str) -> str:
    """Why a reference to secret ``name`` of ``owner`` cannot be resolved, and the fix."""
    whose = f"of {owner}" if owner else "of this workspace's user"
    return (
        f"${{{{secrets.{name}}}}}: no secret {name!r} {whose}; set it with "
        f"`phalanx secret set {name}` (the value is read from stdin)"
    )


def resolve_variables(
    variables: Mapping[str, str], store: SecretStore, owner: str | None
) -> dict[str, str]:
    """``variables`` with each ``${{secrets.NAME}}`` replaced by ``owner``'s value, which
    is remembered for :func:`phalanx.storage.redact.redact` from now on.

    Raises:
        PhalanxError: naming the variable and the secret that is not set.
    """
    secrets = UserSecrets(store, owner)
    resolved = {}
    for key, text in variables.items():

        def value_of(match: re.Match[str], key: str = key) -> str:
            value = secrets.get(match[1])
            if value is None:
                raise PhalanxError(
                    f"environment_variables.{key}: {missing_message(owner, match[1])}"
                )
            remember(value)
            return value

        resolved[key] = REFERENCE_RE.sub(value_of, text)
    return resolved
