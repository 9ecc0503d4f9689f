"""The studio's pages served: one HTML shell per view, the scripts and styles beside it.

A page holds no data: its scripts (``static/*.js``: ``core.js`` the helpers, one
file per view, ``main.js`` which starts the page's view) read everything from
``/api/v1`` (the same routes the CLI and SDK call) and writes it into the page
as text (``textContent``, never HTML), so a rank that prints ``<script>`` shows
those characters. The shell carries only the view's name and the CSRF value
that the page's POSTs echo (see :mod:`phalanx.server.sessions`). The
Content-Security-Policy lets only this server's own scripts run, a second wall
should an escape ever be missed.
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from phalanx import __version__
from phalanx.server.sessions import csrf_value, loopback_host
from phalanx.server.settings import settings_of
from phalanx.studio import STATIC

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
SHELL = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf" content="{csrf}">
<title>phalanx studio</title>
<link rel="stylesheet" href="/static/uPlot.min.css">
<link rel="stylesheet" href="/static/studio.css?v={version}">
</head><body data-view="{view}">
<header><a class="brand" href="/">phalanx studio</a>
<nav><a href="/">Jobs</a><a href="/compare">Compare</a><a href="/models">Models</a>
<a href="/data">Data</a><a href="/environments">Environments</a><a href="/datastores">Datastores</a>
<a href="/compute">Compute</a><a href="/queue">Queue</a><a href="/bench">Benchmarks</a></nav>
<span id="who"></span></header>
<main id="main"></main>
<script src="/static/uPlot.iife.min.js"></script>
{scripts}
</body></html>
"""

# Plain scripts sharing the page's global scope, in this order (no build step).
SCRIPTS = (
    "core", "jobs", "job", "sweep", "logs", "files", "metrics", "collections", "compute", "bench",
    "main",
)  # fmt: skip

router = APIRouter(include_in_schema=False)


def _page(request: Request, view: str) -> Response:
    settings = settings_of(request)
    if not settings.auth and not loopback_host(request):
        raise HTTPException(403, "refused: this server without auth answers loopback names only")
    csrf = csrf_value(request)
    if csrf is None and view != "signin":
        return RedirectResponse("/signin", status_code=303, headers=HEADERS)
    scripts = "\n".join(
        f'<script src="/static/{name}.js?v={__version__}"></script>' for name in SCRIPTS
    )
    html = SHELL.format(
        csrf=escape(csrf or ""), view=escape(view), version=__version__, scripts=scripts
    )
    return HTMLResponse(html, headers=HEADERS)


@router.get("/")
def jobs_page(request: Request) -> Response:
    return _page(request, "jobs")


@router.get("/jobs/{name}")
def job_page(name: str, request: Request) -> Response:
    return _page(request, "job")


@router.get("/compare")
def compare_page(request: Request) -> Response:
    return _page(request, "compare")


@router.get("/queue")
def queue_page(request: Request) -> Response:
    return _page(request, "queue")


@router.get("/bench")
def bench_page(request: Request) -> Response:
    return _page(request, "bench")


# The other collections of the workspace: a table of them, and one of them.
COLLECTIONS = ("models", "data", "environments", "datastores", "compute")


def _collection_routes() -> None:
    def view(kind: str) -> Any:
        def page(request: Request) -> Response:
            return _page(request, kind)

        return page

    for kind in COLLECTIONS:
        router.add_api_route(f"/{kind}", view(kind), methods=["GET"])
        router.add_api_route(f"/{kind}/{{name:path}}", view(kind), methods=["GET"])


_collection_routes()


@router.get("/signin")
def signin_page(request: Request) -> Response:
    return _page(request, "signin")


def install(app: FastAPI) -> None:
    """Serve the studio under ``/`` beside the API (``/api/v1``)."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
