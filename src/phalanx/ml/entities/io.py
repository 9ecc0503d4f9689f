"""``Input`` and ``Output``: a job's data, as Azure ML's SDK writes it."""

from __future__ import annotations

import os
from typing import Any


class Input:
    """A data input of a job (``inputs={"data": Input(type=..., path=...)}``).

    Args:
        type: ``uri_folder`` (default) or ``uri_file``; phalanx names the other
            Azure ML types in its error.
        path: A local path (relative to the current folder), a datastore URI
            (``azureml://datastores/<name>/paths/<path>``), a data asset
            (``azureml:<name>:<version>``, ``azureml:<name>@latest``), ``az://``,
            ``s3://``, ``https://``.
        mode: ``ro_mount`` (default), ``download`` or ``direct``.
        description: Free text; not part of the job's spec.
    """

    def __init__(
        self,
        *,
        type: str = "uri_folder",
        path: str | os.PathLike[str] | None = None,
        mode: str | None = None,
        description: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.type = type
        self.path = None if path is None else os.fspath(path)
        self.mode = mode
        self.description = description
        # Component-input fields (default, optional, min, max…) have no meaning in a
        # command job's spec; kept so a caller sees them, and refused when used.
        self._extra = kwargs

    def _to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("type", self.type), ("path", self.path),
                                  ("mode", self.mode)) if v is not None}  # fmt: skip

    def __repr__(self) -> str:
        return f"Input(type={self.type!r}, path={self.path!r}, mode={self.mode!r})"


class Output:
    """A data output of a job (``outputs={"model": Output(type=...)}``).

    Args:
        type: ``uri_folder`` (default), ``uri_file`` or ``custom_model``.
        path: Where it is kept: a datastore URI; left out, phalanx keeps it with
            the job (``azureml://jobs/<job>/outputs/<name>``).
        mode: ``rw_mount`` (default) or ``upload``.
        name: Register the output under this model or data asset name when the
            job completes.
        version: The version to register; the next number when left out.
        description: Free text; not part of the job's spec.
    """

    def __init__(
        self,
        *,
        type: str = "uri_folder",
        path: str | os.PathLike[str] | None = None,
        mode: str | None = None,
        name: str | None = None,
        version: str | None = None,
        description: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.type = type
        self.path = None if path is None else os.fspath(path)
        self.mode = mode
        self.name = name
        self.version = version
        self.description = description
        self._extra = kwargs

    def _to_dict(self) -> dict[str, Any]:
        items = (("type", self.type), ("path", self.path), ("mode", self.mode),
                 ("name", self.name), ("version", self.version))  # fmt: skip
        return {k: v for k, v in items if v is not None}

    def __repr__(self) -> str:
        return f"Output(type={self.type!r}, path={self.path!r}, mode={self.mode!r})"
