"""The largest per-GPU batch a card holds for one training step, found by running the step.

``largest_batch(step, start=, limit=)`` calls ``step(batch)`` (one forward, backward and
optimizer step at that per-GPU batch) with batches doubling from ``start`` until one runs out of
CUDA memory or ``limit`` is reached, then searches between the last that fit and the first that
did not; the answer is the largest that fit, less ``headroom`` (a share kept for what a real
run adds: validation, the allocator's fragmentation, the other rank's loader), or ``limit`` itself
when the card held it (no out-of-memory edge was seen to keep a share from). Under
``KAGGLEKIT_AS=t4`` the card's memory is capped at the T4's 15 GiB (``machine.ascard``), so a
bigger card answers for a T4. Each try's outcome is in the record (``tries``), with the memory
the largest took (``peak_mb``), for metrics.json or RESULTS.md.
"""
from __future__ import annotations

import gc
from collections.abc import Callable

import torch

OOM_ERRORS = (torch.cuda.OutOfMemoryError,)
HEADROOM = 0.15


def largest_batch(step: Callable[[int], None], *, start: int = 1, limit: int = 4096,
                  headroom: float = HEADROOM, device=None) -> dict:
    """``{"batch": the per-GPU batch to use, "largest_fit", "first_out_of_memory", "tries",
    "peak_mb"}``; ``step(batch)`` runs one training step at ``batch`` (see the module)."""
    tries: list[dict] = []
    fits, fails = 0, None
    size = start
    while size <= limit:  # doubling: the first batch that does not fit
        if _fits(step, size, tries, device):
            fits, size = size, size * 2
        else:
            fails = size
            break
    if fails is None and 0 < fits < limit:  # doubling stepped over the limit: the limit itself
        fits, fails = (limit, None) if _fits(step, limit, tries, device) else (fits, limit)
    low, high = fits, fails
    while high is not None and high - low > 1:  # between the last that fit and the first that did not
        middle = (low + high) // 2
        if _fits(step, middle, tries, device):
            low = middle
        else:
            high = middle
    if low == 0:
        raise RuntimeError("not even a per-GPU batch of 1 fits this card: a smaller model, fp16, "
                           "activation checkpointing or a shorter input")
    peak = next((t["peak_mb"] for t in tries if t["batch"] == low and t["fits"]), None)
    batch = low if high is None else max(1, int(low * (1 - headroom)))  # held the limit: no edge seen
    return {"batch": batch, "largest_fit": low, "first_out_of_memory": high,
            "headroom": headroom, "peak_mb": peak, "tries": tries}


def _fits(step, size: int, tries: list, device) -> bool:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        step(size)
        ok = True
    except OOM_ERRORS:
        ok = False
    peak = None
    if device is not None and torch.device(device).type == "cuda":
        peak = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    tries.append({"batch": size, "fits": ok, "peak_mb": peak})
    gc.collect()  # the failed try's tensors, before the next
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return ok
