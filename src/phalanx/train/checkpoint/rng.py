"""Random-number-generator state as plain data, so a resumed run draws the same numbers.

:func:`rng_state` captures, and :func:`set_rng_state` restores:

* torch's CPU generator (a ``uint8`` tensor);
* every CUDA device's generator, when CUDA is available;
* Python's ``random`` (its tuple state turned into lists and ints);
* NumPy's global ``np.random`` generator, only when NumPy is already imported
  (its key as a list of ints). ``np.random.Generator`` objects a script
  creates itself are not reached; keep their ``bit_generator.state`` yourself.

Everything is a tensor, list, int, float, str or None, so the dict passes
``torch.load(weights_only=True)``.

Each rank has its own generators, and a replicated checkpoint holds rank 0's.
Ranks that must draw differently (data augmentation, dropout) should reseed
from ``(seed, rank, step)`` after a resume rather than all take rank 0's state.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import torch

__all__ = ["rng_state", "set_rng_state"]


def rng_state() -> dict[str, Any]:
    """This process's generator states; see the module docstring for which."""
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state["numpy"] = {
            "bit_generator": str(name),
            "key": [int(k) for k in key],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured; parts that are absent are left alone.

    CUDA states are restored for as many devices as both the state and this
    machine have.
    """
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "python" in state:
        py = state["python"]
        random.setstate((py["version"], tuple(py["internal"]), py["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        for index, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state.cpu(), index)
    if "numpy" in state:
        import numpy as np  # only a state that holds NumPy's needs it

        n = state["numpy"]
        key = np.asarray(n["key"], dtype=np.uint32)
        np.random.set_state(
            (n["bit_generator"], key, n["pos"], n["has_gauss"], n["cached_gaussian"])
        )
