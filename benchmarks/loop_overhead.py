"""The kit's fit loop against a hand-written PyTorch loop: same model, data, optimizer.

Interleaved repeats in ABBA order (plain, kit, kit, plain...) so drift on a
noisy machine hits both alike; prints the median steps/s of each and their ratio,
and the median of the paired ratios (goal >= 0.98), then the import time of kagglekit
against torch, each in a fresh interpreter.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import datasets, models


def plain_loop(model, optimizer, loader, device) -> int:
    model.train()
    steps = 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
    return steps


def kit_loop(model, optimizer, loader, device) -> int:
    result = kk.fit(model, optimizer, loader, kk.supervised(F.cross_entropy),
                    run=kk.Alone(device=device, time_budget=None), epochs=1, checkpoints=None, save_every_min=None,
                    progress=False)
    return result.steps


def timed(fn, *args) -> tuple[float, float]:
    """(steps per wall second, steps per CPU second of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    steps = fn(*args)
    return steps / (time.perf_counter() - wall), steps / (time.process_time() - cpu)


def import_seconds(module: str, repeats: int = 5) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    runs = [float(subprocess.check_output([sys.executable, "-c", code], text=True))
            for _ in range(repeats)]
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=41)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    device = torch.device("cpu")
    torch.set_num_threads(1)  # a steadier measurement on a small shared machine
    ds = datasets.tabular(args.samples, features=64, classes=10)
    model = models.MLP(64, 256, 10, depth=3)
    # One loader for both, so only the loops differ (not the sampler or workers).
    loader = kk.make_loader(ds, args.batch, num_workers=0)
    rates = {"plain": [], "kit": []}
    cpu_rates = {"plain": [], "kit": []}
    timed(plain_loop, model, torch.optim.AdamW(model.parameters()), loader, device)  # warm-up
    order = [("plain", plain_loop), ("kit", kit_loop)]
    for repeat in range(args.repeats):
        # ABBA order: neither loop always runs right after the other (caches, clocks).
        for name, fn in (order if repeat % 2 == 0 else order[::-1]):
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            wall, cpu = timed(fn, model, optimizer, loader, device)
            rates[name].append(wall)
            cpu_rates[name].append(cpu)
    plain, kit = statistics.median(rates["plain"]), statistics.median(rates["kit"])
    print(f"device: {device}, {len(loader)} steps per repeat, {args.repeats} interleaved repeats")
    print(f"plain PyTorch loop : {plain:8.1f} steps/s (median)")
    print(f"kagglekit fit      : {kit:8.1f} steps/s (median)")
    print(f"ratio kit / plain  : {kit / plain:.3f}   (of the medians)")
    paired = sorted(k / p for k, p in zip(rates["kit"], rates["plain"]))
    q1, q3 = statistics.quantiles(paired, n=4)[0], statistics.quantiles(paired, n=4)[2]
    print(f"paired ratios      : median {statistics.median(paired):.3f}   (goal >= 0.98), "
          f"quartiles {q1:.3f}-{q3:.3f} (the machine's noise)")
    cpu_ratio = statistics.median(cpu_rates["kit"]) / statistics.median(cpu_rates["plain"])
    print(f"ratio per CPU-second: {cpu_ratio:.3f}   (less sensitive to other load on the machine)")
    # What a notebook pulls in: the package plus the modules of start() and fit().
    t_torch = import_seconds("torch")
    t_kit = import_seconds("kagglekit, kagglekit.run.context, kagglekit.loop.train")
    print(f"import torch       : {t_torch:.2f} s")
    print(f"import kagglekit   : {t_kit:.2f} s   (ratio {t_kit / t_torch:.2f}, torch included)")


if __name__ == "__main__":
    main()
