"""What starting ranks from the fork server costs, against forking the notebook's own process.

The kit forks its ranks from a clean server (kagglekit.parallel.forkserver) so that a notebook
that already used the GPU or OpenMP can launch. A plain fork of the notebook's process is the
baseline: cheaper to start, but it breaks in exactly those cases. Measured in one run, ABAB:

- two children that return at once: a plain fork (multiprocessing's "fork" context, the function
  inherited) against the kit's children of the warm server, and the server's cold start;
- the same with data the function refers to (``--mb``): a fork shares it copy-on-write, the
  server's children receive it by value (pickled once, sent to each).

    python benchmarks/launch_start.py [--repeats 7] [--mb 256]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import subprocess
import sys
import time

import torch


def _forked(fn, count: int = 2) -> float:
    """Seconds for ``count`` plain forks of this process to run ``fn`` and be joined."""
    started = time.perf_counter()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=fn) for _ in range(count)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return time.perf_counter() - started


def _launched(fn) -> float:
    """Seconds for two children of the fork server to run ``fn`` (the kit's supervisor, no
    process group: the start alone, as the plain fork's)."""
    from kagglekit.parallel.forked import run_forked
    started = time.perf_counter()
    run_forked(lambda _: fn(), 2)
    return time.perf_counter() - started


COLD = ("import time, kagglekit as kk\nt = time.perf_counter()\nkk.launch(lambda: None, nprocs=2)\n"
        "print(time.perf_counter() - t)")


def _cold() -> float:
    """A fresh process's first launch: the server started, torch and the kit imported there."""
    done = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--mb", type=int, default=256)
    args = ap.parse_args()
    data = torch.zeros(args.mb * 2**18)  # float32: mb MiB

    def empty():
        return None

    def reads():
        return float(data[:1].sum())

    _launched(empty)  # the server warm before the first pair
    pairs = {"empty": [], "data": []}
    for _ in range(args.repeats):
        pairs["empty"].append((_forked(empty), _launched(empty)))
        pairs["data"].append((_forked(reads), _launched(reads)))
    cold = statistics.median(_cold() for _ in range(3))
    for name, rows in pairs.items():
        fork, served = (statistics.median(r[i] for r in rows) for i in (0, 1))
        what = "two children, nothing sent" if name == "empty" else f"two children reading {args.mb} MiB"
        print(f"{what:<32} plain fork {fork * 1e3:8.1f} ms   fork server {served * 1e3:8.1f} ms   "
              f"ratio {served / fork:6.2f}")
    print(f"{'first launch of a process':<32} fork server, cold {cold * 1e3:8.1f} ms (its imports, once per "
          "notebook process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
