"""``ml_client.data`` and ``ml_client.models``: data assets and the model registry.

They call :class:`phalanx.service.data.DataAssets` and
:class:`phalanx.service.models.Models`, the interfaces ``phalanx data`` and
``phalanx model`` use, on this machine's workspace or a server's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.ml.entities.assets import Data, Model
from phalanx.ml.errors import MLError, argument_error, surfaced_methods
from phalanx.ml.notes import note_once
from phalanx.ml.records import data_from_json, model_from_json
from phalanx.ml.specdict import default_store
from phalanx.service.data import DataAssets
from phalanx.service.models import Models
from phalanx.storage.uri import is_uri


def _local_or_uri(path: str | os.PathLike[str] | None, where: str, kind: str | None = None) -> str:
    """A URI as written; a local path made absolute against the current folder, checked
    to exist (and to be a file for ``uri_file``, a folder for ``uri_folder``).

    Raises:
        MLError: no path, or a local path that is missing or of the other kind, named as
            the caller wrote it.
    """
    if path is None or not os.fspath(path).strip():
        raise argument_error(where, "path", "is required; give a local path or a URI")
    text = os.fspath(path)
    if is_uri(text):
        return str(default_store(text))
    local = Path(text.removeprefix("file://")).expanduser().absolute()
    if not local.exists():
        raise argument_error(
            where, "path", f"{text!r} does not exist; the path is relative to the current folder"
        )
    if kind == "uri_file" and local.is_dir():
        raise argument_error(where, "path", f"{text!r} is a folder; use type='uri_folder'")
    if kind == "uri_folder" and not local.is_dir():
        raise argument_error(where, "path", f"{text!r} is a file; use type='uri_file'")
    return str(local)


def _version(version: str | int | None, label: str | None, where: str) -> str:
    if version is not None:
        return str(version)
    if label is None or label == "latest":
        return "latest"
    raise argument_error(where, "label", f"phalanx knows the label 'latest' only; got {label!r}")


def _not_found(kind: str, name: str, names: Iterable[str], how: str, where: str) -> None:
    """After a failed read: when no version of ``name`` exists, say so with the Python fix.

    Raises:
        MLError: ``name`` has no version at all.
    """
    if name not in set(names):
        raise argument_error(where, "name", f"{kind} {name!r} not found; register it with {how}")


@surfaced_methods("data")
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
            path=_local_or_uri(data.path, where, data.type),
            type=data.type,
            description=data.description,
            no_check=False,
        )
        return data_from_json(made)

    def get(self, name: str, version: str | None = None, label: str | None = None) -> Data:
        """One version (``latest`` without ``version``).

        Raises:
            MLError: no asset ``name``.
            PhalanxError: no such version.
        """
        wanted = _version(version, label, "ml_client.data.get()")
        try:
            return data_from_json(self._data.show(name, wanted))
        except PhalanxError:
            how = f"ml_client.data.create_or_update(Data(name={name!r}, path=...))"
            names = (d["name"] for d in self._data.list_all(None))
            _not_found("data asset", name, names, how, "ml_client.data.get()")
            raise

    def list(self, name: str | None = None) -> Iterator[Data]:
        """Every version of every asset (or of ``name``)."""
        return iter([data_from_json(d) for d in self._data.list_all(name)])


@surfaced_methods("models")
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
        """One version (``latest`` without ``version``).

        Raises:
            MLError: no model ``name``.
            PhalanxError: no such version.
        """
        wanted = _version(version, label, "ml_client.models.get()")
        try:
            return model_from_json(self._models.show(name, wanted))
        except PhalanxError:
            how = f"ml_client.models.create_or_update(Model(name={name!r}, path=...))"
            names = (m["name"] for m in self._models.list_all(None))
            _not_found("model", name, names, how, "ml_client.models.get()")
            raise

    def list(self, name: str | None = None) -> Iterator[Model]:
        """Every version of every model (or of ``name``)."""
        return iter([model_from_json(m) for m in self._models.list_all(name)])

    def download(
        self, name: str, version: str, download_path: str | os.PathLike[str] = "."
    ) -> None:
        """Copy a version's files into ``download_path/<name>/``, each checked (sha256)."""
        dest = Path(download_path) / name
        self._models.download(name, str(version), dest, overwrite=False)
