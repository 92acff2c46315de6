"""The write-up's launch-bound loop: CPU work then a small GPU step, cycle after cycle.

Four ways to run the same cycles, each measured (cycles/s, GPU utilisation, a
phase breakdown and the kit's verdict):
- sync: one cycle at a time; the CPU waits for the GPU's answer every cycle.
- batched: the CPU part of k cycles, then one GPU step on all k at once.
- cuda_graph: the GPU step captured once as a CUDA graph and replayed (GPU only).
- process_pool: the CPU part in worker processes, overlapping the GPU steps.
Savepoints: every N cycles the results so far are written out and released,
so memory stays flat instead of growing with the run.
``fit_replay`` shows the same remedy inside the fit loop: a small model trained
eagerly and with ``fit(cuda_graphs="auto")``.
"""
from __future__ import annotations

import functools
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from .. import atomic, cudagraph, data, datasets, models, monitor

STRATEGIES = ("sync", "batched", "cuda_graph", "process_pool")


def cpu_work(cycle: int, size: int = 256, rounds: int = 40) -> np.ndarray:
    """Host-side work of one cycle (feature building in the write-up): a few ms of numpy."""
    rng = np.random.default_rng(cycle)
    x = rng.standard_normal(size).astype(np.float32)
    for _ in range(rounds):
        x = np.tanh(x * 1.01 + 0.01 * np.roll(x, 1))
    return x


def make_gpu_step(size: int, device: torch.device, depth: int = 6):
    """A small network applied to a batch of cycle inputs: many tiny kernels."""
    torch.manual_seed(0)
    layers = [torch.randn(size, size, device=device) / size ** 0.5 for _ in range(depth)]

    def step(x: torch.Tensor) -> torch.Tensor:
        for w in layers:
            x = torch.relu(x @ w)
        return x.sum(dim=1)
    return step


class Savepoints:
    """Results held in memory, written out and released every ``every`` cycles (0: never)."""

    def __init__(self, every: int, folder: Path):
        self.every, self.folder, self.held, self.bytes, self.curve = every, folder, [], 0, []

    def add(self, cycle: int, result: torch.Tensor) -> None:
        self.held.append(result.detach())
        self.bytes += result.numel() * result.element_size() + 4096  # tensor + bookkeeping
        if self.every and (cycle + 1) % self.every == 0:
            with atomic.atomic_path(self.folder / f"save-{cycle + 1:06d}.pt") as tmp:
                torch.save(torch.stack([h.cpu() for h in self.held]), tmp)
            self.held, self.bytes = [], 0
        self.curve.append(self.bytes / 2**20)


def _run(strategy: str, cycles: int, size: int, k: int, device, save: Savepoints, pool):
    step = make_gpu_step(size, device)
    t_cpu = t_gpu = 0.0
    done = 0
    graphed = None
    if strategy == "cuda_graph":
        graphed = cudagraph.GraphedFunction(step, (torch.zeros(1, size, device=device),))
        if graphed.graph is None:
            return {"skipped": graphed.status}
    work = functools.partial(cpu_work, size=size)  # the GPU step's width, not the default
    chunks = pool.imap(work, range(cycles), chunksize=8) if strategy == "process_pool" else None
    while done < cycles:
        n = min(k if strategy == "batched" else 1, cycles - done)
        t0 = time.perf_counter()
        feats = [next(chunks) if chunks else work(done + i) for i in range(n)]
        x = torch.from_numpy(np.stack(feats)).to(device)
        t1 = time.perf_counter()
        out = (graphed or step)(x)
        values = out.cpu()  # the answer the CPU waits for (the write-up's sync point)
        t_cpu, t_gpu = t_cpu + (t1 - t0), t_gpu + (time.perf_counter() - t1)
        for i in range(n):
            save.add(done + i, values[i:i + 1])
        done += n
    return {"t_cpu": t_cpu, "t_gpu": t_gpu}


def measure(strategy: str, cycles: int, size: int, k: int, device, save_every: int,
            folder: Path) -> dict:
    """Run ``cycles`` cycles one way; cycles/s, utilisation, breakdown and verdict."""
    save = Savepoints(save_every, folder)
    started = time.perf_counter()
    with monitor.GPUSampler(interval_s=0.1) as sampler, \
            (mp.get_context("fork").Pool(2) if strategy == "process_pool" else _nothing()) as pool:
        timing = _run(strategy, cycles, size, k, device, save, pool)
    if "skipped" in timing:
        return {"strategy": strategy, "skipped": timing["skipped"]}
    wall = time.perf_counter() - started
    per = (cycles if strategy != "batched" else -(-cycles // k))
    breakdown = {"sampled_steps": per, "median_s": {"data_wait": timing["t_cpu"] / per, "h2d": 0.0,
                                                      "compute": timing["t_gpu"] / per,
                                                      "optimizer": 0.0, "total": wall / per}}
    breakdown["fraction"] = {p: breakdown["median_s"][p] / breakdown["median_s"]["total"]
                             for p in monitor.PHASES}
    gpu = sampler.summary()
    verdict = monitor.diagnose(breakdown, gpu)
    return {"strategy": strategy, "cycles_per_s": round(cycles / wall, 1),
            "gpu_util_pct": gpu.get("util_mean"), "verdict": verdict["verdict"],
            "advice": verdict["advice"], "memory_curve_mb": save.curve, "breakdown": breakdown}


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def study(cycles: int, size: int, k: int, save_every: int, device) -> list[dict]:
    """Every strategy on the same cycles (savepoints on); one row each."""
    with tempfile.TemporaryDirectory() as tmp:
        return [measure(s, cycles, size, k, device, save_every, Path(tmp)) for s in STRATEGIES]


def memory_curves(cycles: int, size: int, save_every: int, device) -> dict:
    """Held memory per cycle with and without savepoints (the sync strategy)."""
    with tempfile.TemporaryDirectory() as tmp:
        return {label: measure("sync", cycles, size, 1, device, every, Path(tmp))["memory_curve_mb"]
                for label, every in (("without savepoints", 0), (f"savepoints every {save_every}",
                                                                 save_every))}


def memory_figure(curves: dict):
    from ..plots import _pyplot
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    for label, curve in curves.items():
        ax.plot(curve, label=label)
    ax.set(xlabel="cycle", ylabel="MB held", title="memory with and without savepoints")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def fit_replay(steps: int, size: int, device, precision: str = "auto") -> list[dict]:
    """A deep, narrow MLP (launch-bound) trained by fit with cuda_graphs off and "auto"."""
    from ..train import fit, supervised
    rows = []
    for mode in ("off", "auto"):
        if mode != "off" and device.type != "cuda":
            rows.append({"cuda_graphs": mode, "skipped": "CUDA graphs need a CUDA device"})
            continue
        torch.manual_seed(0)
        model = models.MLP(size, size, 4, depth=8)
        loader = data.make_loader(datasets.tabular(64 * steps, features=size), 64,
                                  num_workers=0)
        result = fit(model, torch.optim.AdamW(model.parameters(), 1e-3), loader,
                     supervised(torch.nn.functional.cross_entropy), max_steps=steps,
                     precision=precision, cuda_graphs=mode, device=device, progress=False,
                     checkpoints=None)
        rows.append({"cuda_graphs": mode, "steps_per_s": round(result.samples_per_s / 64, 1),
                     "status": result.cuda_graphs, "precision": result.precision,
                     "verdict": result.diagnosis()["verdict"], "breakdown": result.breakdown})
    return rows
