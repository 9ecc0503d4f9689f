"""``/api/v1/datastores``: create, list, show, delete datastores and list their folders.

No answer holds a credential: ``show`` and ``list`` name where each comes from. A
value piped in for ``--store`` arrives in the create request only and goes to
the workspace's 0600 secrets file.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from phalanx.server.auth import User
from phalanx.server.settings import request_workspace
from phalanx.service.access import Caller
from phalanx.service.datastores import DatastoreCreate, WorkspaceDatastores

router = APIRouter(prefix="/api/v1/datastores", tags=["datastores"])


def _datastores(request: Request, who: Caller) -> WorkspaceDatastores:
    return WorkspaceDatastores(request_workspace(request), who)


@router.post("", status_code=201)
def create_datastore(body: DatastoreCreate, request: Request, who: User) -> dict[str, Any]:
    """Register a datastore; it is listed once first (unless ``no_check``)."""
    return _datastores(request, who).create(body)


@router.get("")
def list_datastores(request: Request, who: User) -> dict[str, Any]:
    """Every datastore, ``default`` first; credentials as references."""
    return {"datastores": _datastores(request, who).list_all()}


@router.get("/{name:path}/ls")
def list_folder(
    name: str,
    request: Request,
    who: User,
    path: Annotated[str, Query(max_length=4096)] = "",
) -> dict[str, Any]:
    """The folders and files at ``path`` of the datastore."""
    return {"entries": _datastores(request, who).ls(name, path)}


@router.get("/{name:path}")
def show_datastore(name: str, request: Request, who: User) -> dict[str, Any]:
    """One datastore; credentials as references."""
    return _datastores(request, who).show(name)


@router.delete("/{name:path}")
def delete_datastore(name: str, request: Request, who: User) -> dict[str, Any]:
    """Forget a datastore and its stored credentials; the data is not touched."""
    _datastores(request, who).delete(name)
    return {"deleted": name}
