"""Hill climbing's time on 300 OOF prediction sets of 100,000 rows (the size a Playground
ensemble reaches), against scoring the same candidates one at a time with NumPy / scikit-learn.

Synthetic OOFs, correlated as a competition's are: each the target plus an error all share, a
bias of its own measure (a negative weight cancels it) and noise of its own.
Per metric: the climb's seconds, its steps, seconds
per step, and the baseline: scoring every (model, weight) candidate of one step with NumPy one by
one (the loop a notebook would write), timed on a sample of candidates and scaled to all of them.
``--device cuda`` on a GPU machine; the kit picks the GPU by itself where the notebook sees one.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from kagglekit.score import hillclimb, scoring


def oofs(models: int, rows: int, task: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    signal = rng.normal(size=rows)
    y = signal if task == "regression" else (signal + rng.normal(size=rows) > 0).astype(np.int64)
    # OOFs of one competition's models are highly correlated: an error they share (what no blend
    # removes), a bias each carries in its own measure (what a negative weight cancels), their own noise
    common, shared = rng.normal(size=rows), rng.normal(size=rows)
    preds = {}
    for m in range(models):
        view = (signal + 0.5 * common + rng.uniform(-0.6, 0.6) * shared
                + rng.normal(scale=rng.uniform(0.2, 0.6), size=rows))
        value = view if task == "regression" else 1 / (1 + np.exp(-view))
        preds[f"m{m:03d}"] = value.astype(np.float32)
    return preds, y


def numpy_step_seconds(preds: dict, y, metric, sample: int = 60) -> float:
    """One step's candidates scored one by one with NumPy (scikit-learn for AUC), timed on
    ``sample`` of them and scaled to every (model, weight) pair."""
    names = list(preds)
    blend = preds[names[0]].astype(np.float64)
    grid = [w for w in hillclimb.GRID if w != 0]
    pairs = [(m, w) for m in names for w in grid]
    chosen = [pairs[i] for i in np.random.default_rng(0).choice(len(pairs), sample, replace=False)]
    started = time.perf_counter()
    for m, w in chosen:
        metric.score(y, (1 - w) * blend + w * preds[m])
    return (time.perf_counter() - started) / sample * len(pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=300)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--metrics", default="rmse,auc")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max-steps", type=int, default=100, help="steps at most per climb (AUC on a CPU: minutes each)")
    args = ap.parse_args()
    print(f"{args.models} OOFs x {args.rows:,} rows on {args.device} ({torch.get_num_threads()} threads)")
    for name in args.metrics.split(","):
        metric = scoring.get(name, 0 if name in scoring.REGRESSION else 2)
        preds, y = oofs(args.models, args.rows, metric.task)
        started = time.perf_counter()
        climb = hillclimb.climb(preds, y, metric, device=args.device, max_steps=args.max_steps)
        seconds = time.perf_counter() - started
        steps = len(climb.steps) - 1
        per_step = seconds / (steps + (steps < args.max_steps))  # an unsuccessful last step was scored too
        baseline = numpy_step_seconds(preds, y, metric)
        print(f"{name:5} climb {seconds:7.1f} s, {steps} steps, {len(climb.weights)} models kept "
              f"({sum(w < 0 for w in climb.weights.values())} negative), CV {climb.steps[0]['score']:.4f} -> "
              f"{climb.score:.4f}; {per_step:.2f} s/step against {baseline:.1f} s/step one candidate at a time "
              f"with NumPy (ratio {baseline / per_step:.1f}x)")


if __name__ == "__main__":
    main()
