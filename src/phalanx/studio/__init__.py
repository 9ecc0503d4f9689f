"""phalanx studio: the web page of a workspace (jobs, live logs of every rank, metrics).

Served by ``phalanx server start`` under ``/`` (beside ``/api/v1``) and by
``phalanx studio`` for this machine's workspace (loopback only). The page is
``static/`` (the scripts, styles and uPlot, shipped in the package: no Node
build at install time); the server's :mod:`phalanx.server.studio_pages` serves
it with one HTML shell per view. The pages read and act through ``/api/v1``
only, as the CLI does. ``urls.py`` is where a job's page is, for the CLI and SDK.
"""

from pathlib import Path

STATIC = Path(__file__).parent / "static"
"""The page's scripts and styles."""
