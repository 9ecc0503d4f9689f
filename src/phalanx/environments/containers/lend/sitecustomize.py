"""What phalanx lends an image without torch, put after the image's own packages.

Python runs this at start-up inside a job's container, where this folder is on
``PYTHONPATH`` (and nowhere else). Each folder of ``PHALANX_LENT_PATH`` (phalanx's
site-packages, mounted read-only) is added at the *end* of ``sys.path``, its ``.pth``
files read: a package the image has (mpi4py built on its MPI, its numpy) stays the
image's, and only what it lacks (torch) comes from phalanx. The image's own
``sitecustomize``, if it has one, runs afterwards as it would have. Standard library
only: this runs on the image's Python.
"""

import importlib.machinery
import importlib.util
import os
import site
import sys


def _lend() -> None:
    for folder in os.environ.get("PHALANX_LENT_PATH", "").split(os.pathsep):
        if folder and folder not in sys.path:
            site.addsitedir(folder)


def _run_the_images_own() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_lend()
_run_the_images_own()
