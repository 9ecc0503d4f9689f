"""What a workspace answers for the verbs other than ``job``, as JSON-able values.

Each module holds one command group's calls on a workspace: ``datastores.py``,
``data.py`` (data assets), ``models.py`` (the model registry), ``targets.py``
(compute targets and the queue) and ``jobfiles.py`` (a folder of a job, packed).
The CLI calls them directly on this machine's workspace; the server's routes
call the very same functions on its own, and :mod:`phalanx.client` sends the
CLI's calls to those routes. So a command prints the same thing wherever the
workspace lives.
"""
