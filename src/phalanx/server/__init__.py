"""``phalanx server``: one workspace served over HTTP to a team.

``app.py`` builds the FastAPI application (``/api/v1``, its OpenAPI document
at ``/api/v1/openapi.json``); ``jobs_api.py`` holds the job routes,
``jobfiles_api.py`` serves a job's files, ``datastores_api.py``, ``data_api.py``,
``models_api.py`` and ``compute_api.py`` the other command groups (their logic is
:mod:`phalanx.service`, the same the CLI runs on a local workspace),
``logread.py`` reads log files from byte offsets for remote streaming,
``uploads.py`` checks and unpacks what clients upload, ``auth.py`` checks API
tokens, ``errors.py`` turns phalanx's errors into 4xx answers with the same one
line the CLI prints, and ``serve.py`` runs it all under uvicorn while keeping
the workspace's scheduler alive.
"""
