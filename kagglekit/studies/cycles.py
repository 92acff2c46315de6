"""A launch-bound loop measured: CPU work, then a small GPU step, cycle after cycle.

The caller brings the two steps (``cpu_step(cycle) -> np.ndarray`` and
``gpu_step(x) -> tensor``); this module runs the same cycles four ways and
measures each (cycles/s, GPU utilisation, where a cycle's time goes, the kit's
verdict), and the memory of a run that holds every result against one that
writes results out at savepoints:

- sync: one cycle at a time; the CPU waits for the GPU's answer every cycle.
- batched: the CPU part of k cycles, then one GPU step on all k at once.
- cuda_graph: ``graph_cycles`` GPU steps (one per cycle, in order) captured once as one CUDA
  graph and replayed every ``graph_cycles`` cycles: one launch for N cycles' kernels, as the
  write-up does (50 cycles per graph, 10 graphs for 500); a remainder runs eagerly (GPU only).
- process_pool: the CPU part in worker processes, overlapping the GPU steps; as many workers as
  the measured CPU and GPU times of a cycle say keep the GPU fed (``pool_workers``), within the
  machine's cores less the one that drives the GPU.

Memory is the process's: resident set size from /proc on CPU (freed heap memory
handed back with ``memory.release_host`` so that it measures what is live), the CUDA
allocator's bytes on GPU, read after every cycle.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..loop import cudagraph, memory, monitor
from ..machine import env
from ..parallel import forked
from ..state import atomic

STRATEGIES = ("sync", "batched", "cuda_graph", "process_pool")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def memory_mb(device: torch.device) -> float:
    """What the process holds now: CUDA tensors on a GPU, resident pages on CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device) / 2**20
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


class Savepoints:
    """Every cycle's result, held until a savepoint writes them out and lets them go.

    ``every=0`` never saves: the results pile up for the whole run (the write-up's
    symptom). ``curve`` is the process's memory after each cycle, relative to the start.
    """

    def __init__(self, every: int, folder: Path, device: torch.device):
        self.every, self.folder, self.device = every, Path(folder), device
        self.held: list[torch.Tensor] = []
        memory.release_host()  # start from what is live, not from what earlier runs freed
        self.start_mb = memory_mb(device)
        self.curve: list[float] = []
        self.cycle_s: list[float] = []

    def add(self, cycle: int, result: torch.Tensor) -> None:
        self.held.append(result)
        if self.every and (cycle + 1) % self.every == 0:
            with atomic.atomic_path(self.folder / f"save-{cycle + 1:06d}.pt") as tmp:
                torch.save([h.cpu() for h in self.held], tmp)  # no stacked copy: no spike
            self.held = []
            memory.release_host()  # what a long run does after writing its results out
        self.curve.append(memory_mb(self.device) - self.start_mb)


def in_order(gpu_step, n: int):
    """One function doing ``n`` cycles' GPU steps in order (row i is cycle i's input): what
    one CUDA graph captures for ``n`` cycles."""
    def steps(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([gpu_step(x[i:i + 1]) for i in range(n)])
    return steps


def workers_for(cpu_s: float, gpu_s: float, cores: int) -> tuple[int, int]:
    """(workers, workers needed): CPU time over GPU time per cycle, rounded up, within the
    cores less the one that drives the GPU, at least one."""
    needed = int(np.ceil(cpu_s / max(gpu_s, 1e-9) - 1e-9))
    return max(1, min(needed, cores - 1)), needed


def pool_workers(cpu_step, gpu_step, device: torch.device, probe: int = 8) -> dict:
    """Worker processes for the process-pool strategy, from a measured cycle: enough that
    their CPU parts together keep up with the GPU steps (CPU time / GPU time per cycle), at
    most the cores less the one that drives the GPU, at least one."""
    t_cpu = t_gpu = 0.0
    for i in range(probe):
        t0 = time.perf_counter()
        x = torch.from_numpy(np.stack([cpu_step(i)])).to(device)
        t1 = time.perf_counter()
        gpu_step(x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t2 = time.perf_counter()
        t_cpu, t_gpu = t_cpu + (t1 - t0), t_gpu + (t2 - t1)
    cores = env.cpus()
    workers, needed = workers_for(t_cpu / probe, t_gpu / probe, cores)
    return {"workers": workers, "cpu_ms": round(1e3 * t_cpu / probe, 3), "gpu_ms": round(1e3 * t_gpu / probe, 3),
            "why": f"a cycle's CPU part {1e3 * t_cpu / probe:.2f} ms against its GPU step "
                   f"{1e3 * t_gpu / probe:.2f} ms needs {needed} worker(s); {cores} core(s), one drives the GPU"}


def run(strategy: str, cpu_step, gpu_step, cycles: int, device: torch.device, *,
        batch_cycles: int = 8, graph_cycles: int = 50, save_every: int = 0, folder: Path) -> dict:
    """``cycles`` cycles one way: cycles/s, utilisation, breakdown, verdict, memory."""
    graphed = None
    extra: dict = {}
    if strategy == "cuda_graph":
        n = max(1, min(graph_cycles, cycles))
        example = torch.from_numpy(np.stack([cpu_step(i) for i in range(n)])).to(device)
        graphed = cudagraph.GraphedFunction(in_order(gpu_step, n), (example,))
        if graphed.graph is None:
            return {"strategy": strategy, "skipped": graphed.status}
        extra = {"graph_cycles": n, "replays": cycles // n, "eager_cycles": cycles % n}
    if strategy == "process_pool":
        extra = {"pool": pool_workers(cpu_step, gpu_step, device)}
    save = Savepoints(save_every, folder, device)
    started = time.perf_counter()
    global _POOL_STEP
    _POOL_STEP = cpu_step  # read by the forked workers: any callable works, a closure or lambda too
    pool_ctx = _pool(extra["pool"]["workers"]) if strategy == "process_pool" else contextlib.nullcontext()
    k = batch_cycles if strategy == "batched" else extra.get("graph_cycles", 1)
    with monitor.GPUSampler(interval_s=0.1) as sampler, pool_ctx as pool:
        t_cpu, t_gpu = _cycles(cpu_step, gpu_step, graphed, cycles, device, k, save, pool)
    wall = time.perf_counter() - started
    steps = -(-cycles // k)
    breakdown = _breakdown(t_cpu, t_gpu, wall, steps)
    gpu = sampler.summary()
    verdict = monitor.diagnose(breakdown, gpu)
    return {"strategy": strategy, "cycles_per_s": round(cycles / wall, 1),
            "gpu_util_pct": gpu.get("util_mean"), "verdict": verdict["verdict"],
            "advice": verdict["advice"], "breakdown": breakdown, "gpu": gpu,
            "memory_curve_mb": save.curve, "cycle_s": save.cycle_s, **extra}


def _cycles(cpu_step, gpu_step, graphed, cycles, device, k, save: Savepoints, pool):
    """The loop itself, ``k`` cycles per GPU call (batched: one step on k rows; a graph: its
    k captured steps in one replay, a shorter remainder eagerly); seconds on each part."""
    t_cpu = t_gpu = 0.0
    results = pool.imap(_pool_step, range(cycles), chunksize=8) if pool else None
    done = 0
    while done < cycles:
        n = min(k, cycles - done)
        t0 = time.perf_counter()
        feats = [next(results) if results else cpu_step(done + i) for i in range(n)]
        x = torch.from_numpy(np.stack(feats)).to(device)
        t1 = time.perf_counter()
        if graphed is not None:
            out = graphed(x) if n == k else in_order(gpu_step, n)(x)
        else:
            out = gpu_step(x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the answer the CPU waits for (the write-up's sync)
        t2 = time.perf_counter()
        t_cpu, t_gpu = t_cpu + (t1 - t0), t_gpu + (t2 - t1)
        for i in range(n):
            save.add(done + i, out[i].clone())  # its own storage: held alone, not via the batch
            save.cycle_s.append((t2 - t0) / n)
        done += n
    return t_cpu, t_gpu


_POOL_STEP: Callable | None = None


def _pool_step(cycle: int):
    assert _POOL_STEP is not None, "set before the pool forks"
    return _POOL_STEP(cycle)


@contextlib.contextmanager
def _pool(workers: int):
    """A fork pool whose workers end as a pool's workers must: closed and joined once the work
    is done, never left waiting. Forked from a kit child (``launcher.isolated``), a worker would
    inherit its SIGTERM handler (ask the fit to stop) and survive ``Pool.terminate``'s SIGTERM,
    leaving the terminating join, and whatever reads the notebook's output, waiting forever
    (seen once in the sandbox under load): the workers take the default back and die with
    their parent."""
    pool = mp.get_context("fork").Pool(workers, initializer=_plain_worker)
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    else:
        pool.close()  # every result read: the workers take their sentinels and exit
    finally:
        pool.join()


def _plain_worker() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides
    forked.end_with_parent(signal.SIGKILL)


def _breakdown(t_cpu: float, t_gpu: float, wall: float, steps: int) -> dict:
    """The cycle loop's time in fit's phases: CPU work counts as waiting for data."""
    median = {"data_wait": t_cpu / steps, "h2d": 0.0, "compute": t_gpu / steps,
              "optimizer": 0.0, "total": wall / steps}
    return {"sampled_steps": steps, "median_s": median,
            "fraction": {p: median[p] / median["total"] for p in monitor.PHASES}}


def study(cpu_step, gpu_step, cycles: int, device: torch.device, *, batch_cycles: int,
          save_every: int, folder: Path, graph_cycles: int = 50) -> list[dict]:
    """Every strategy on the same cycles, savepoints on; one row each."""
    return [run(s, cpu_step, gpu_step, cycles, device, batch_cycles=batch_cycles,
                graph_cycles=graph_cycles, save_every=save_every, folder=Path(folder) / s)
            for s in STRATEGIES]


def savepoint_study(cpu_step, gpu_step, cycles: int, device: torch.device, *, save_every: int,
                    folder: Path) -> dict:
    """The sync loop holding every result, then saving every ``save_every`` cycles:
    ``{label: {"memory_curve_mb", "cycle_s"}}``."""
    # Savepoints first: memory freed by the first run is reused by the second, and that
    # must not flatter the savepoints.
    runs = {f"savepoints every {save_every}": save_every, "without savepoints": 0}
    out = {}
    for label, every in runs.items():
        row = run("sync", cpu_step, gpu_step, cycles, device, save_every=every,
                  folder=Path(folder) / f"save-{every}")
        out[label] = {"memory_curve_mb": row["memory_curve_mb"], "cycle_s": row["cycle_s"]}
    return out


def growth(values: list[float]) -> float:
    """Mean of the last quarter over the mean of the first quarter (1.0: flat)."""
    q = max(1, len(values) // 4)
    first, last = float(np.mean(values[:q])), float(np.mean(values[-q:]))
    return last / first if first > 0 else float("inf")
