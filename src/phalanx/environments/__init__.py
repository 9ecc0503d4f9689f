"""A job's software environment, wherever it comes from.

- :mod:`~phalanx.environments.pythonenv`: a ``conda_file`` or ``pip_file`` built
  once per content into a cached environment on a node (as the job's account on
  a walled-off server), and the notes a spec's environment earns.
- :mod:`~phalanx.environments.containers`: ``environment: {image: …}`` — the
  engine, images made ready and probed, images built from a Dockerfile by
  content hash (here or on a Ray node), the ``run`` line of a node's launcher.
- :mod:`~phalanx.environments.registered`: environments registered in the
  workspace (``azureml:name@version``), their files copied in.

The variable contract every rank sees is not here: it is the launcher's
(:mod:`phalanx.launch`).
"""
