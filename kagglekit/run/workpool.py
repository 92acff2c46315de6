"""Units of work shared out over processes: one per GPU (both T4s), each its share of the cores.

``share(run, jobs)`` does every job ``(unit, fn)`` whose unit is not done yet: ``fn(threads)``
computed once and stored in the unit's cache entry, by whichever worker process claims it
first (a claim is a file created exclusively, so the quick jobs of one worker do not wait on
the slow ones of another). Each worker sees one GPU (``CUDA_VISIBLE_DEVICES``: two LightGBM
folds, or a CatBoost beside an XGBoost, on the two T4s at once; without a GPU the jobs run here,
one after another, with every core) and a share of the cores
(``threads``, for the library's ``num_threads`` / ``nthread`` / ``thread_count``; OpenMP
threads that spin on a core another process needs made a trial 40 times slower here). The
workers are forked from the kit's clean server, so a library the notebook already ran (LightGBM
hangs in a child forked after it) cannot hang them.

A worker stores each result as it finishes (a session killed mid-way keeps them), stops taking
jobs when the session's time cannot hold one more (estimated from its own jobs), and a job that
raises ``Unfinished`` is left for the next version. Then the parent reads every stored result:
``{unit name: value}`` of the done units.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..machine import gpus
from ..parallel.forked import in_worker, run_forked
from ..parallel.workers import pin_gpu, processes, threads_each
from . import turns
from .unit import Unit


def share(run, jobs: Sequence[tuple[Unit, Callable[[int], object]]], *, workers: int | None = None,
          size: Callable[[Unit, Any], float] | None = None) -> dict:
    """Every job's result, ``{unit.name: value}``, for the units done (here or before); ``size``:
    a job's size when its time goes with it (``turns.in_turn``)."""
    names = [unit.name for unit, _ in jobs]
    if len(set(names)) < len(names):
        raise ValueError(f"two jobs share the unit name {max(names, key=names.count)!r}")
    pending = [(u, fn) for u, fn in jobs if not u.done]
    workers = min(workers or processes(), len(pending))
    computed = []
    if pending and (workers <= 1 or in_worker()):  # here: the cache records each as it computes
        computed = _work(run, pending, threads_each(1), None, 0, size)
    elif pending:
        with tempfile.TemporaryDirectory(prefix="kagglekit-claims-") as claims:
            body = _Body(run, pending, threads_each(workers), claims, bool(gpus.inventory()), size)
            reports = run_forked(body, workers, what="unit worker", threads=threads_each(workers), every=True)
        computed = [e for report in reports for e in report]
        run.cache.events.extend(computed)  # the workers' records, merged into this process's
    return _collect(run, jobs, {e["name"] for e in computed})


class _Body:
    """One worker's loop (a class, so that it travels to the worker by value)."""

    def __init__(self, run, pending, threads: int, claims: str, pin_gpu: bool, size=None):
        self.run, self.pending, self.threads, self.claims, self.pin_gpu = run, pending, threads, claims, pin_gpu
        self.size = size

    def __call__(self, index: int) -> list:
        if self.pin_gpu:
            pin_gpu(index)
        return _work(self.run, self.pending, self.threads, self.claims, index, self.size)


def _work(run, pending, threads: int, claims: str | None, index: int, size=None) -> list:
    """The jobs this worker claims, done in order; the cache's record of each it computed."""
    claimed = ((u, fn) for u, fn in pending if claims is None or _claim(Path(claims) / f"{u.name}-{u.key}"))

    def compute(unit: Unit, fn: Callable[[int], object]) -> dict:
        run.cache.compute(unit.name, unit.key, lambda: fn(threads), config=unit.config, shaping=unit.shaping)
        unit.carry()
        return {**run.cache.events[-1], "worker": index}
    return [event for _, event in turns.in_turn(claimed, compute, who="pool", size=size)]


def _claim(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _collect(run, jobs, computed: set) -> dict:
    """The stored results: those ``computed`` this session read back; those stored before
    through ``unit.cached``, a hit like any unit's (recorded, its checkpoints carried)."""
    results = {}
    for unit, fn in jobs:
        if unit.name in computed:
            results[unit.name] = run.cache.lookup(unit.name, unit.key, unit.shaping)[0]
            run.chain[f"cache:{unit.name}"] = "computed"
        elif unit.done:
            results[unit.name] = unit.cached(lambda f=fn: f(threads_each(1)))
        else:  # left for the next version (the session's time, or kk.Unfinished)
            run.chain[f"cache:{unit.name}"] = "pending"
    run.log(cache=run.cache.stats(), chain=run.chain)
    return results
