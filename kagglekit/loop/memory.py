"""Memory between models and phases: peak figures, and freeing what was held."""
from __future__ import annotations

import ctypes
import ctypes.util
import gc

import torch


def _cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def reset_peak(device) -> None:
    """Start the device's peak figure anew. Before this process's first CUDA allocation there is no
    peak to reset, and torch's allocator, not started yet, refuses the call ("Invalid device
    argument": the sequence notebook's first model on a card, seen on a lent H200)."""
    if _cuda(device) and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats(device)


def peak_mb(device) -> float | None:
    """Peak memory allocated by tensors since the last reset (None on CPU)."""
    if not _cuda(device):
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


_host_baseline: list = []  # resident MB when the host peak was last reset


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_of(device) -> None:
    """Start a peak measurement: the CUDA allocator's on a GPU; on CPU the process's resident
    high-water mark (Linux resets it through /proc/self/clear_refs), from what it holds now."""
    if _cuda(device):
        torch.cuda.reset_peak_memory_stats(device)
        return
    release_host()  # freed heap handed back: the next peak is what is live, not reuse of it
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    _host_baseline[:] = [(_status_kb("VmRSS") or 0) / 1024]


def peak_of(device) -> dict:
    """The peak since ``reset_peak_of``: ``{"peak_mb", "unit"}``; on CPU the resident
    high-water mark above what the process held at the reset (None without /proc)."""
    if _cuda(device):
        return {"peak_mb": peak_mb(device), "unit": "CUDA allocated"}
    high = _status_kb("VmHWM")
    if high is None or not _host_baseline:
        return {"peak_mb": None, "unit": "resident (RSS) above the start"}
    return {"peak_mb": round(max(0.0, high / 1024 - _host_baseline[0]), 1),
            "unit": "resident (RSS) above the start"}


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
