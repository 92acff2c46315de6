"""Disk space for checkpoints and kept results: checked before the first save, named when it runs out.

Kaggle saves at most about 20 GB of /kaggle/working, and a version whose output is
over it loses it. Retention (``keep_last`` plus the best) times the checkpoint's size
is compared with the free space and, on Kaggle, with that limit before anything is
written; a full disk mid-write becomes an error naming the folder and the space needed
(the write itself is atomic: the previous checkpoint stays loadable). ``room_to_keep``
is the same bound for a unit whose cached result is large (decoded audio or images),
checked by the notebook before the work starts.
"""
from __future__ import annotations

import errno
import shutil
import warnings
from pathlib import Path

import torch

KAGGLE_OUTPUT_LIMIT = 20 * 10**9  # bytes of /kaggle/working a version may keep


class CheckpointSpaceError(OSError):
    """No room left for a checkpoint."""


def state_bytes(obj) -> int:
    """Bytes of the tensors in a (nested) checkpoint state: about its size on disk."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(state_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(state_bytes(v) for v in obj)
    return 0


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MB"


def _used(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _kaggle_output_left(folder: Path) -> int | None:
    """What is left of the output Kaggle keeps, for a folder under /kaggle/working; None elsewhere."""
    from ..machine.env import where
    here = where()
    if here.on_kaggle and here.root is not None:
        working = here.root / "working"
        if working in folder.resolve().parents or folder.resolve() == working:
            return max(0, KAGGLE_OUTPUT_LIMIT - _used(working))
    return None


def room_to_keep(folder: Path) -> int:
    """Bytes that can still be written under ``folder`` and kept: its disk's free space, or less
    on Kaggle, under /kaggle/working, where a version keeps about 20 GB (a version over it loses
    its output)."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    left = _kaggle_output_left(folder)
    return free if left is None else min(free, left)


def warn_if_short(folder: Path, size: int, keep_last: int) -> None:
    """Warn when the checkpoints retention keeps would not fit."""
    folder.mkdir(parents=True, exist_ok=True)
    needed = size * (keep_last + 2)  # the kept ones, the best, and one being written
    free = shutil.disk_usage(folder).free
    problems = []
    if needed > free:
        problems.append(f"only {_mb(free)} free in {folder}")
    left = _kaggle_output_left(folder)
    if left is not None and needed > left:
        problems.append(f"Kaggle keeps about {_mb(KAGGLE_OUTPUT_LIMIT)} of output and {_mb(left)} of it are left")
    if problems:
        warnings.warn(f"checkpoints of ~{_mb(size)} each, {keep_last} kept plus the best, need "
                      f"~{_mb(needed)}, but {' and '.join(problems)}: lower keep_last (now "
                      f"{keep_last}), save a smaller state, or free space", stacklevel=4)


def raise_if_full(err: OSError, folder: Path, size: int) -> None:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        free = shutil.disk_usage(folder).free if folder.exists() else 0
        raise CheckpointSpaceError(
            err.errno, f"no space left in {folder} for a checkpoint of ~{_mb(size)} "
            f"({_mb(free)} free); the previous checkpoint is intact. Free space or lower keep_last.") from err
