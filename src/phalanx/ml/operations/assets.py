"""``ml_client.data`` and ``ml_client.models``: data assets and the model registry.

They call :class:`phalanx.service.data.DataAssets` and
:class:`phalanx.service.models.Models`, the interfaces ``phalanx data`` and
``phalanx model`` use, on this machine's workspace or a server's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from phalanx.ml.entities.assets import Data, Model
from phalanx.ml.errors import MLError, argument_error
from phalanx.ml.notes import note_once
from phalanx.ml.records import data_from_json, model_from_json
from phalanx.service.data import DataAssets
from phalanx.service.models import Models
from phalanx.storage.uri import is_uri


def _local_or_uri(path: str | os.PathLike[str] | None, where: str) -> str:
    """A URI as written; a local path made absolute against the current folder."""
    if path is None or not os.fspath(path).strip():
        raise argument_error(where, "path", "is required; give a local path or a URI")
    text = os.fspath(path)
    if is_uri(text):
        return text
    return str(Path(text.removeprefix("file://")).expanduser().absolute())


def _version(version: str | int | None, label: str | None, where: str) -> str:
    if version is not None:
        return str(version)
    if label is None or label == "latest":
        return "latest"
    raise argument_error(where, "label", f"phalanx knows the label 'latest' only; got {label!r}")


class DataOperations:
    """The data asset verbs of :class:`~phalanx.ml.MLClient`."""

    def __init__(self, backend: DataAssets) -> None:
        self._data = backend

    def create_or_update(self, data: Data) -> Data:
        """Register a new version of a data asset (the next number without ``version``).

        Raises:
            PhalanxError: a missing path, a path of the other type, or the version exists.
        """
        where = "ml_client.data.create_or_update()"
        if not isinstance(data, Data):
            raise argument_error(where, "data", f"must be Data(...); got {type(data).__name__}")
        if not data.name:
            raise argument_error(where, "name", "is required; give Data(name=...)")
        if data.tags:
            note_once("data-tags", "phalanx does not keep tags of data assets; they are left out")
        made = self._data.create(
            name=data.name,
            version=None if data.version is None else str(data.version),
            path=_local_or_uri(data.path, where),
            type=data.type,
            description=data.description,
            no_check=False,
        )
        return data_from_json(made)

    def get(self, name: str, version: str | None = None, label: str | None = None) -> Data:
        """One version (``latest`` without ``version``)."""
        return data_from_json(
            self._data.show(name, _version(version, label, "ml_client.data.get()"))
        )

    def list(self, name: str | None = None) -> Iterator[Data]:
        """Every version of every asset (or of ``name``)."""
        return iter([data_from_json(d) for d in self._data.list_all(name)])


class ModelOperations:
    """The model registry verbs of :class:`~phalanx.ml.MLClient`."""

    def __init__(self, backend: Models) -> None:
        self._models = backend

    def create_or_update(self, model: Model) -> Model:
        """Register a new version: the files at ``path`` (local, a datastore URI, or a job's
        output ``azureml://jobs/<job>/outputs/<output>``) are copied into the registry.

        Raises:
            MLError: a type phalanx does not register.
            PhalanxError: a missing path, a bad name, or the version exists.
        """
        where = "ml_client.models.create_or_update()"
        if not isinstance(model, Model):
            raise argument_error(where, "model", f"must be Model(...); got {type(model).__name__}")
        if not model.name:
            raise argument_error(where, "name", "is required; give Model(name=...)")
        if model.type not in ("custom_model", None):
            raise MLError(
                f"type {model.type!r} is not supported yet; phalanx registers the files as "
                "type custom_model",
                field="type",
                source=where,
            )
        made = self._models.create(
            name=model.name,
            path=_local_or_uri(model.path, where),
            version=None if model.version is None else str(model.version),
            description=model.description,
            tags={str(k): str(v) for k, v in (model.tags or {}).items()},
        )
        return model_from_json(made)

    def get(self, name: str, version: str | None = None, label: str | None = None) -> Model:
        """One version (``latest`` without ``version``)."""
        return model_from_json(
            self._models.show(name, _version(version, label, "ml_client.models.get()"))
        )

    def list(self, name: str | None = None) -> Iterator[Model]:
        """Every version of every model (or of ``name``)."""
        return iter([model_from_json(m) for m in self._models.list_all(name)])

    def download(
        self, name: str, version: str, download_path: str | os.PathLike[str] = "."
    ) -> None:
        """Copy a version's files into ``download_path/<name>/``, each checked (sha256)."""
        dest = Path(download_path) / name
        self._models.download(name, str(version), dest, overwrite=False)
