"""The guide's optimisations that no other check measures, each as a gain on this card against the
same work without it, in one call (docs/optimisations.md called them "not measured on a T4 yet"):

- on the GNN of seed 000 (``benchmarks/gnn_switches.py``'s: two GCN layers on sampled
  neighbourhoods, batch 512, fan-outs 10,5; the built-in graph at the Elliptic set's 203,769 nodes):
  torch.compile's step time, accumulation's, activation checkpointing's peak memory, and the
  loop's wait for its batch with the sampling in a loader worker;
- on the U-Net of seed 002 at its Kaggle patch (fp16, batch 4): cuDNN's autotuning, and a batch
  copied from pinned memory with ``non_blocking`` against a blocking copy from pageable memory,
  each with the step it overlaps.

Each variant is measured after its warm-up beside its baseline in this process; variants the
check's deadline (``KAGGLEKIT_CHECK_DEADLINE_S``) has no time for are named, not run. A ``PART``
line per measurement keeps what was measured when the check is killed.
"""
from __future__ import annotations

import json
import os
import sys
import time

from common import REPO, card, main

os.environ["KAGGLEKIT_AS"] = "t4"
sys.path.insert(0, str(REPO / "benchmarks"))
NODES = 203_769
DEADLINE = time.monotonic() + float(os.environ.get("KAGGLEKIT_CHECK_DEADLINE_S", "1e9"))


def _part(name: str, **facts) -> dict:
    print("PART " + json.dumps({"name": name, **facts}, default=str), flush=True)
    return facts


def gnn_switches(device) -> dict:
    """Each switch's step time, the loop's wait and the peak memory against none of them."""
    import gnn_switches as g

    import kagglekit as kk
    data = kk.graphsets.load(None, nodes=NODES, positive_rate=0.05, seed=0)
    variants = {"none": {}, "accumulate=2": {"accumulate": 2}, "grad_checkpointing": {"grad_checkpointing": True},
                "sampling in 1 worker": {"workers": 1}, "compile": {"compile": True}}  # compile's minutes last
    measured, skipped = {}, []
    for name, switches in variants.items():
        if time.monotonic() > DEADLINE - 20:
            skipped.append(name)
            continue
        measured[name] = _part(f"gnn {name}", **g.timed(data, device, **switches))
    base = measured.get("none")
    ratios = {name: {"step": round(m["step_ms"] / base["step_ms"], 2),
                     "wait": round(m["wait_ms"] / base["wait_ms"], 2) if base["wait_ms"] else None,
                     "memory": round(m["peak_mb"] / base["peak_mb"], 2) if base["peak_mb"] else None}
              for name, m in measured.items() if base}
    return {"measured": measured, "against_none": ratios, "not_run": skipped}


def _unet_steps(device, cudnn_benchmark: bool, steps: int = 6) -> float:
    """Seconds per step of the U-Net at its Kaggle patch, fp16, after two warm-up steps."""
    import torch

    import kagglekit as kk
    from kagglekit.tools import borrow
    seg = kk.figures.pipeline(borrow.pipeline("segmentation_3d", REPO / "notebooks", REPO / "kernel-metadata"))
    torch.manual_seed(0)
    model = seg.UNet3D(seg.width, seg.depth)
    p = seg.patch
    batch = (torch.rand(4, 1, p, p, p), torch.randint(0, 3, (4, 1, p, p, p)).to(torch.uint8))
    moved = kk.loaders.to_device(batch, device)
    common = dict(run=kk.Alone(device=device), progress=False, monitor=kk.Monitor(gpu=False), epochs=10**6,
                  speed=kk.Speed(precision="fp16", cudnn_benchmark=cudnn_benchmark))
    loss = kk.supervised(seg.surface_loss)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    kk.fit(model, optimizer, [moved], loss, max_steps=2, **common)  # autotuning happens here
    torch.cuda.synchronize(device)
    started = time.perf_counter()
    kk.fit(model, optimizer, [moved], loss, max_steps=steps, **common)
    torch.cuda.synchronize(device)
    return (time.perf_counter() - started) / steps


def copies(device, rounds: int = 20) -> dict:
    """A U-Net batch's copy to the card with a step of work behind it: pinned + non_blocking (the copy
    overlaps the work) against pageable + blocking, seconds per round."""
    import torch
    batch = torch.rand(4, 1, 96, 96, 96)
    pinned = batch.pin_memory()
    work = torch.randn(4096, 4096, device=device)

    def rounds_s(source, non_blocking: bool) -> float:
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        for _ in range(rounds):
            on_card = source.to(device, non_blocking=non_blocking)
            work @ work  # the step the copy can overlap
            on_card.sum()
        torch.cuda.synchronize(device)
        return (time.perf_counter() - started) / rounds
    rounds_s(pinned, True)  # warm-up
    plain, overlapped = rounds_s(batch, False), rounds_s(pinned, True)
    return _part("copies", pageable_blocking_ms=round(1e3 * plain, 3),
                 pinned_non_blocking_ms=round(1e3 * overlapped, 3), gain=round(plain / overlapped, 2))


def check():
    device = card()
    facts: dict = {"gnn": gnn_switches(device)}
    if time.monotonic() < DEADLINE - 15:
        off, on = _unet_steps(device, False), _unet_steps(device, True)
        facts["cudnn_benchmark"] = _part("cudnn", off_ms=round(1e3 * off, 2), on_ms=round(1e3 * on, 2),
                                         gain=round(off / on, 2))
    if time.monotonic() < DEADLINE - 5:
        facts["pinned_non_blocking"] = copies(device)
    ok = "none" in facts["gnn"]["measured"] and "cudnn_benchmark" in facts and "pinned_non_blocking" in facts
    return ok, facts


if __name__ == "__main__":
    main(check)
