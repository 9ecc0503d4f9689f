"""Run a node's launcher inside a container image (``environment: {image: …}``).

An image changes *how* a node's launcher is started, not *who* starts it: local
compute (and a Ray node's agent) starts ``podman run … IMAGE python -m
torch.distributed.run …`` where it would start the launcher itself. Inside, the
launcher and its ranks see the same paths, the same environment contract and
write the same per-rank logs and error files as without an image; phalanx's
worker wrapper is standard-library only, so it runs on the image's Python.

- :mod:`~phalanx.environments.containers.engine`: which engine (podman or docker),
  and how it is called.
- :mod:`~phalanx.environments.containers.image`: an image made ready (there, or pulled) and probed.
- :mod:`~phalanx.environments.containers.run`: the ``run`` command line of a node's launcher.
- :mod:`~phalanx.environments.containers.sweep`: a job's containers found and removed by label.
"""
