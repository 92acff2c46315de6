"""Memory between models and phases: peak figures, and freeing what was held."""
from __future__ import annotations

import ctypes
import ctypes.util
import gc

import torch


def _cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def reset_peak(device) -> None:
    if _cuda(device):
        torch.cuda.reset_peak_memory_stats(device)


def peak_mb(device) -> float | None:
    """Peak memory allocated by tensors since the last reset (None on CPU)."""
    if not _cuda(device):
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


def stats_mb(device) -> dict:
    """Allocated / reserved / peak in MB (empty on CPU)."""
    if not _cuda(device):
        return {}
    return {"allocated_mb": round(torch.cuda.memory_allocated(device) / 2**20, 1),
            "reserved_mb": round(torch.cuda.memory_reserved(device) / 2**20, 1),
            "peak_mb": peak_mb(device)}


def release(device) -> None:
    """Return cached blocks to the driver once the caller dropped its references.

    Call after ``del model, optimizer``: the next model then starts from a clean
    allocator instead of inheriting fragmentation (and its peak is its own).
    """
    gc.collect()
    if _cuda(device):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


_LIBC = _libc()


def release_host() -> None:
    """Give freed host memory back to the OS (glibc's malloc_trim; nothing elsewhere).

    glibc keeps freed small blocks in its heap: without this the resident size of a
    process that dropped a gigabyte of results stays where its peak was.
    """
    gc.collect()
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)
