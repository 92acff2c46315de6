"""How many worker processes a machine runs and what each is given: one per GPU (both T4s), each
its share of the cores, each shown its own GPU. The work pool's units (``run.workpool``) and the
search's parallel trials (``search.tune``) both follow it, so the two agree on a machine's shape.
"""
from __future__ import annotations

import os

from ..machine import env, gpus


def processes() -> int:
    """Worker processes: one per GPU; without one, this process with every core (measured on two
    cores, benchmarks/tabular_lightgbm.py: five LightGBM folds shared over two processes of one
    thread took 1.24 times as long as in place with two threads, at the same score)."""
    return len(gpus.inventory()) or 1


def threads_each(workers: int) -> int:
    """Each worker's share of the cores this process may really use (``OMP_NUM_THREADS``, when
    set, caps them), at least one."""
    return max(1, env.thread_cap(env.real_cpus()) // max(1, workers))


def pin_gpu(index: int) -> None:
    """Show a fresh worker process GPU ``index`` alone (as its cuda:0), before anything in it
    touches CUDA."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(index)
