"""Out-of-fold and test predictions written for blends, and scored: ``oof.parquet``,
``test.parquet`` (a row per predicted value: id, step, fold, target, a column per model; formats
that cannot run code) and the CV scores per fold, their mean and spread, and on all OOF rows."""
from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from ..state import atomic


def write(out: Path, folder: Path, ids: np.ndarray, fold_of: np.ndarray, oof: dict, test: dict,
          results: dict, target, test_ids) -> None:
    """oof.parquet / test.parquet in ``out`` (the output root a blend kernel attaches), each
    fold's test predictions as ``test_fold<k>_<model>.npy`` in ``folder``, and its predictions of every
    labelled row, where the fold returned them, as ``labelled_fold<k>.parquet`` (what a student reads)."""
    n = len(ids)
    for k, result in results.items():  # each fold model's predictions of every labelled row: a student's
        if result.labelled:
            with atomic.atomic_path(folder / f"labelled_fold{k}.parquet") as tmp:
                long_frame(ids, result.labelled, None).to_parquet(tmp, index=False)
    seen = ~np.isnan(next(iter(oof.values())).reshape(n, -1)).all(1)
    frame = long_frame(ids[seen], {m: v[seen] for m, v in oof.items()},
                       target[seen] if target is not None else None)
    frame.insert(2, "fold", np.repeat(fold_of[seen], len(frame) // max(int(seen.sum()), 1)))
    with atomic.atomic_path(out / "oof.parquet") as tmp:
        frame.to_parquet(tmp, index=False)
    if not test:
        return
    rows = len(next(iter(test.values())))
    names = np.asarray(test_ids if test_ids is not None else np.arange(rows)).astype(str)
    with atomic.atomic_path(out / "test.parquet") as tmp:
        long_frame(names, test, None).to_parquet(tmp, index=False)
    for k, result in results.items():
        for model, values in result.test.items():
            with atomic.atomic_path(folder / f"test_fold{k}_{model}.npy") as tmp:
                with open(tmp, "wb") as f:
                    np.save(f, np.asarray(values))


def long_frame(ids: np.ndarray, predictions: dict, target):
    """A row per predicted value: id, step (0 for one value per row), target, a column per model."""
    import pandas as pd
    first = np.asarray(next(iter(predictions.values())))
    steps = int(np.prod(first.shape[1:])) if first.ndim > 1 else 1
    frame = pd.DataFrame({"id": np.repeat(ids, steps), "step": np.tile(np.arange(steps), len(ids))})
    if target is not None:  # one per value (a forecast's steps), or one per row (a class label)
        target = np.asarray(target, dtype=np.float64).reshape(-1)
        frame["target"] = np.repeat(target, steps) if len(target) == len(ids) else target
    for model, values in predictions.items():
        frame[model] = np.asarray(values, dtype=np.float64).reshape(-1)
    return frame


def scores(oof: dict, val_rows: list, target, metric) -> dict:
    """Per model: the metric on each fold's rows, their mean and spread, and on all OOF rows."""
    out = {}
    for model, values in oof.items():
        per_fold = [float(metric(target[rows], values[rows])) for rows in val_rows]
        seen = ~np.isnan(values.reshape(len(values), -1)).all(1)
        out[model] = {"per_fold": per_fold, "mean": statistics.fmean(per_fold),
                      "std": statistics.pstdev(per_fold),
                      "oof": float(metric(target[seen], values[seen]))}
    return out
