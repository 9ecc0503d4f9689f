"""phalanx studio: the web page of a workspace (jobs, live logs of every rank, metrics).

Served by ``phalanx server start`` under ``/`` (beside ``/api/v1``) and by
``phalanx studio`` for this machine's workspace (loopback only). ``pages.py``
serves the HTML shells and ``static/`` (the page script, styles and uPlot,
shipped in the package: no Node build at install time). The pages read and act
through ``/api/v1`` only, as the CLI does.
"""
