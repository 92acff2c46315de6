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
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..machine import env, gpus
from ..machine.budget import Unfinished
from ..parallel.forked import in_worker, run_forked


def processes() -> int:
    """Worker processes: one per GPU; without one, this process with every core (measured on two
    cores, benchmarks/tabular_lightgbm.py: five LightGBM folds shared over two processes of one
    thread took 1.24 times as long as in place with two threads, at the same score)."""
    return len(gpus.inventory()) or 1


def threads_each(workers: int) -> int:
    """Each worker's share of the cores this process may really use (at least one)."""
    return max(1, env.real_cpus() // max(1, workers))


def share(run, jobs: list[tuple[object, Callable[[int], object]]], *, workers: int | None = None) -> dict:
    """Every job's result, ``{unit.name: value}``, for the units done (here or before)."""
    names = [unit.name for unit, _ in jobs]
    if len(set(names)) < len(names):
        raise ValueError(f"two jobs share the unit name {max(names, key=names.count)!r}")
    pending = [(u, fn) for u, fn in jobs if not u.done]
    workers = min(workers or processes(), len(pending))
    reports = []
    if pending and (workers <= 1 or in_worker()):
        reports = [_work(run, pending, threads_each(1), None, 0)]
    elif pending:
        with tempfile.TemporaryDirectory(prefix="kagglekit-claims-") as claims:
            body = _Body(run, pending, threads_each(workers), claims, bool(gpus.inventory()))
            reports = run_forked(body, workers, what="unit worker", threads=threads_each(workers), every=True)
    return _collect(run, jobs, [e for r in reports for e in r])


class _Body:
    """One worker's loop (a class, so that it travels to the worker by value)."""

    def __init__(self, run, pending, threads: int, claims: str, pin_gpu: bool):
        self.run, self.pending, self.threads, self.claims, self.pin_gpu = run, pending, threads, claims, pin_gpu

    def __call__(self, index: int) -> list:
        if self.pin_gpu:  # before anything here touches CUDA
            os.environ["CUDA_VISIBLE_DEVICES"] = str(index)
        return _work(self.run, self.pending, self.threads, self.claims, index)


def _work(run, pending, threads: int, claims: str | None, index: int) -> list:
    """The jobs this worker claims, done in order; the cache's record of each."""
    spent, events = [], []
    for unit, fn in pending:
        if claims is not None and not _claim(Path(claims) / f"{unit.name}-{unit.key}"):
            continue
        if not unit.fits(statistics.median(spent) if spent else None):
            print(f"kagglekit pool: {unit.name} left for the next version (the session's time "
                  "cannot hold it)", flush=True)
            break
        started = time.monotonic()
        try:
            run.cache.compute(unit.name, unit.key, lambda f=fn: f(threads), config=unit.config,
                              shaping=unit.shaping)
        except Unfinished as stopped:
            print(f"kagglekit pool: {unit.name}: {stopped}", flush=True)
            break
        unit.carry()
        spent.append(time.monotonic() - started)
        events.append({**run.cache.events[-1], "worker": index})
    return events


def _claim(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _collect(run, jobs, events: list) -> dict:
    """The stored results, the workers' cache records merged into this process's."""
    run.cache.events.extend(events)
    computed = {e["name"] for e in events if not e["hit"]}
    results = {}
    for unit, _ in jobs:
        found = run.cache.lookup(unit.name, unit.key, unit.shaping)
        if found is None:
            run.chain[f"cache:{unit.name}"] = "pending"
            continue
        value, meta, where = found
        if unit.name not in computed:
            run.cache.events.append({"name": unit.name, "key": unit.key, "hit": True, "from": str(where),
                                     "seconds_saved": meta["seconds"]})
            unit.carry()
        run.chain[f"cache:{unit.name}"] = "computed" if unit.name in computed else "hit"
        results[unit.name] = value
    run.log(cache=run.cache.stats(), chain=run.chain)
    return results
