"""Tensors memory-mapped from a file, sent to other processes as that file, not as their bytes.

``kk.launch`` sends the launched function by value, and with it every tensor it refers to: each
rank unpacks a copy of the notebook's decoded images or spectrograms, about six times their bytes
on two ranks (benchmarks/launch_payload.py). A tensor ``load`` mapped from a torch file instead
travels as the file's path, its place in the file's value and its view (``reference``, which the
launch's pickler asks first): the rank maps the same file, and the processes share its pages in
the page cache. What the machine holds is the data once, whatever the ranks and their loader
workers read.

The mapping is private (torch's ``mmap=True``): a tensor written in place stays written in this
process only. Such a tensor, and one whose file was replaced since (a unit recomputed), is sent by
value, as any other: a rank never reads other data than the notebook holds. (Written through
``.numpy()`` the kit cannot see the write: treat a mapped value as read-only.)
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class _Origin:
    """Where a mapped tensor came from: its file (as it was when mapped) and its place in the value."""
    path: str
    stamp: tuple  # (inode, size, mtime_ns): a replaced file is another file
    route: tuple  # keys and indices from the loaded value to the tensor
    tensor: weakref.ref  # the loaded tensor (its storage's owner while it lives)
    version: int  # its in-place writes counter when mapped (views share it)


_ORIGINS: dict[int, _Origin] = {}  # storage address -> origin, while the loaded tensor lives
_OPENED: dict[tuple, Any] = {}  # (path, stamp) -> the value mapped in this process (a rank's)


def _stamp(path: str) -> tuple:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def load(path: str | Path):
    """The torch file at ``path`` (weights only), its tensors mapped from it, not read: the pages
    are read as they are touched and may be dropped under memory pressure (they are the file's).
    Each tensor is registered so that a launch sends it as a reference."""
    path = os.path.abspath(path)
    stamp = _stamp(path)
    value = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    for route, tensor in _tensors(value, ()):
        if tensor.untyped_storage().nbytes() == 0:
            continue  # nothing to share, and every empty storage may sit at one address
        address = tensor.untyped_storage().data_ptr()
        _ORIGINS[address] = _Origin(path, stamp, route, weakref.ref(tensor, _forget(address)), tensor._version)
    return value


def _forget(address: int):
    def forget(_ref) -> None:
        origin = _ORIGINS.get(address)
        if origin is not None and origin.tensor() is None:
            del _ORIGINS[address]
    return forget


def _tensors(value, route: tuple):
    """(route, tensor) of every tensor in a value of dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        yield route, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, (*route, key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _tensors(item, (*route, index))


def origin_of(tensor: torch.Tensor) -> _Origin | None:
    """The origin of a tensor that is (a view of) a mapped one, unchanged since: not written in
    place, its file not replaced. None otherwise, and for anything autograd tracks."""
    if type(tensor) is not torch.Tensor or tensor.requires_grad or tensor.device.type != "cpu":
        return None
    origin = _ORIGINS.get(tensor.untyped_storage().data_ptr())
    if origin is None:
        return None
    loaded = origin.tensor()
    if loaded is None or loaded._version != origin.version:
        return None
    try:
        return origin if _stamp(origin.path) == origin.stamp else None
    except OSError:  # deleted since
        return None


def reference(tensor: torch.Tensor):
    """A pickle reduction of ``tensor`` as its file and view (``reopen``), or None (by value)."""
    origin = origin_of(tensor)
    if origin is None:
        return None
    return reopen, (origin.path, origin.stamp, origin.route, tensor.dtype, tuple(tensor.shape),
                    tuple(tensor.stride()), tensor.storage_offset())


def reopen(path: str, stamp: tuple, route: tuple, dtype, shape, stride, offset) -> torch.Tensor:
    """In the receiving process: the same view of the same file, mapped here (once per file)."""
    if _stamp(path) != stamp:
        raise RuntimeError(f"{path} was replaced after the notebook mapped it (its unit recomputed while the "
                           "launch started): launch again")
    opened = _OPENED.get((path, stamp))
    if opened is None:
        opened = _OPENED[(path, stamp)] = load(path)
    loaded = opened
    for step in route:
        loaded = loaded[step]
    return torch.empty(0, dtype=dtype).set_(loaded.untyped_storage(), offset, shape, stride)
