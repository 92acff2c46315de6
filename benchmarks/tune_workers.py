"""Completed Optuna trials per minute with 2 workers against 1, on a CPU-bound objective.

Each configuration runs a fresh study of the same size; the ratio is the speed-up
the second worker buys (goal >= 1.7 on 2 cores).
"""
from __future__ import annotations

import argparse
import tempfile
import time

from kagglekit import tune


def objective(trial) -> float:
    x = trial.suggest_float("x", -3, 3)
    total = 0
    for i in range(5_000_000):  # pure-Python CPU work (~1 s): one core per worker
        total += i % 7
    return -(x - 1) ** 2 + total * 0


def trials_per_minute(workers: int, n_trials: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        tune.optimize(objective, f"bench{workers}", n_trials, directory=tmp, workers=workers)
        return n_trials / (time.perf_counter() - started) * 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=16)
    args = ap.parse_args()
    one = trials_per_minute(1, args.trials)
    two = trials_per_minute(2, args.trials)
    print(f"1 worker : {one:6.1f} trials/min")
    print(f"2 workers: {two:6.1f} trials/min")
    print(f"ratio 2/1: {two / one:.2f}   (goal >= 1.7 on 2 cores)")


if __name__ == "__main__":
    main()
