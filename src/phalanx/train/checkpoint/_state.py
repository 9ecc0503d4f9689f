"""Check that a state can be read back with ``weights_only=True``, and snapshot it.

Loading refuses anything but plain data (see :mod:`phalanx.train.checkpoint`),
so a state holding, say, a ``numpy.float64`` or a custom object would save
fine and then fail to load on the day it is needed. :func:`check` finds such
values when ``save()`` is called, and names them.

:func:`snapshot` is the asynchronous save's copy: every tensor is copied to
CPU so that training may change the originals as soon as ``save()`` returns.
The copies go into buffers kept from the previous save of the same shape
(safe because at most one save is in flight): writing into memory that is
already mapped is several times faster than allocating it afresh, which is
most of what an asynchronous save costs the training loop.
"""

from __future__ import annotations

import copy
from collections import Counter, OrderedDict
from collections.abc import Mapping
from typing import Any

import torch
import torch.serialization

_ATOMS = (type(None), bool, int, float, complex, str, bytes)
_TORCH_ATOMS = (torch.dtype, torch.device, torch.layout)
_DICTS = (dict, OrderedDict, Counter)
_SEQUENCES = (list, tuple, set)

KeyPath = tuple[Any, ...]
"""Where a value sits in the state: the keys and indices leading to it."""


def _where(path: KeyPath) -> str:
    return "state" + "".join(f"[{key!r}]" for key in path)


def _refuse(value: Any, path: KeyPath, sharded: bool) -> TypeError:
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    hint = "store a plain value (float(x), a tensor, its state_dict()) instead"
    if isinstance(value, torch.Tensor) and not sharded:
        hint = "save distributed tensors with save_sharded()"
    return TypeError(
        f"{_where(path)} is a {kind}, which torch.load(weights_only=True) will not read "
        f"back; {hint}, or allow the type with torch.serialization.add_safe_globals"
    )


def _user_allowed(value: Any) -> bool:
    allowed = torch.serialization.get_safe_globals()
    return any(type(value) is (a[0] if isinstance(a, tuple) else a) for a in allowed)


def _walk(value: Any, path: KeyPath, sharded: bool, copy_tensor: Any) -> Any:
    """Check ``value``; return it rebuilt with ``copy_tensor`` applied to each tensor.

    ``copy_tensor`` is ``None`` to check only (the value itself is returned).
    """
    kind = type(value)
    if kind in _ATOMS or isinstance(value, _TORCH_ATOMS) or kind is torch.Size:
        return value
    if isinstance(value, torch.Tensor):
        if kind not in (torch.Tensor, torch.nn.Parameter) and not sharded:
            raise _refuse(value, path, sharded)
        return value if copy_tensor is None else copy_tensor(value, path)
    if kind in _DICTS:
        out = {}
        for key, item in value.items():
            if type(key) not in _ATOMS:
                raise _refuse(key, (*path, key), sharded)
            out[key] = _walk(item, (*path, key), sharded, copy_tensor)
        return value if copy_tensor is None else kind(out)
    if kind in _SEQUENCES:
        items = [_walk(v, (*path, i), sharded, copy_tensor) for i, v in enumerate(value)]
        return value if copy_tensor is None else kind(items)
    if kind is bytearray:
        return value if copy_tensor is None else bytearray(value)
    if sharded and hasattr(value, "state_dict") and hasattr(value, "load_state_dict"):
        return value  # a DCP Stateful: DCP asks it for its state itself
    if _user_allowed(value):
        return value if copy_tensor is None else copy.deepcopy(value)
    raise _refuse(value, path, sharded)


def check(state: Mapping[str, Any], sharded: bool = False) -> dict[str, Any]:
    """``state`` as a dict, after checking that every value in it can be loaded back.

    Args:
        state: The mapping given to ``save()``.
        sharded: Allow tensor subclasses (DTensor) and DCP ``Stateful`` objects.

    Raises:
        TypeError: A value (named by its path, e.g. ``state['opt']['lr']``)
            would be refused by ``torch.load(weights_only=True)``.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping; got {type(state).__qualname__}")
    for key, value in state.items():
        if not isinstance(key, str):
            raise TypeError(f"state keys must be strings; got {key!r}")
        _walk(value, (key,), sharded, None)
    return dict(state)


class Stager:
    """Copies states to CPU for the background writer, reusing buffers between saves.

    Holds, between saves, one CPU copy of every tensor of the last state:
    an asynchronous save costs that much host memory.
    """

    def __init__(self) -> None:
        self._buffers: dict[KeyPath, torch.Tensor] = {}

    def snapshot(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``state`` that shares no tensor memory with it.

        Raises:
            TypeError: As :func:`check`.
        """
        check(state)
        used: dict[KeyPath, torch.Tensor] = {}
        # The same tensor (or view) twice, as with tied weights, is copied once
        # and stays shared in the copy, as torch.save keeps it in the original.
        seen: dict[tuple[Any, ...], torch.Tensor] = {}
        cuda = False

        def copy_tensor(t: torch.Tensor, path: KeyPath) -> torch.Tensor:
            nonlocal cuda
            t = t.detach()
            if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
                return t.to("cpu", copy=True)
            key = (
                t.device,
                t.untyped_storage().data_ptr(),
                t.storage_offset(),
                tuple(t.shape),
                t.stride(),
                t.dtype,
            )
            if key in seen:
                return seen[key]
            buf = self._buffers.get(path)
            if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
                pin = t.is_cuda and torch.cuda.is_available()
                buf = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=pin)
            buf.copy_(t, non_blocking=t.is_cuda and buf.is_pinned())
            cuda = cuda or t.is_cuda
            used[path] = seen[key] = buf
            return buf

        out = {key: _walk(value, (key,), False, copy_tensor) for key, value in state.items()}
        if cuda:
            torch.cuda.synchronize()  # the non-blocking copies must land before the write
        self._buffers = used
        return out
