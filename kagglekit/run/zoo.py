"""Many models cross-validated on the same folds: the out-of-fold pool a tabular ensemble needs.

``cross_validate(cv, models, fold_data, ...)``: every ``Model`` trained on every fold, each
(model, fold) a unit of its own (``fold.sub``: the model's config and code, the fold's data
and rows), so a rerun or the next kernel version retrains nothing, and changing one model's
parameters retrains that model only. The units are shared out over the GPUs' worker processes
(``workpool``: the two T4s busy at once). When every fold of every model is done, the folds'
predictions are assembled and written as ``CrossValidation`` writes them (``oof.parquet``,
``test.parquet``: a column per model, what a blend kernel or ``oofsources`` reads), and
scored per model: mean, spread, each fold, and the training's seconds and device.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import workpool
from .folds import CVResult, Predictions, as_predictions, as_tensors, checked


@dataclass
class Model:
    """``train(data, threads) -> Predictions`` for one fold: ``data`` is ``fold_data(fold)``
    (the fold's training, validation and test inputs) with the unit under ``"unit"`` (its
    checkpoints), ``threads`` its process's share of the cores; its ``oof`` and ``test`` the
    predictions (arrays). ``config``: the values handed to it (its searched parameters); ``code``:
    the functions whose change retrains it and whose parameters its key holds (default: ``train``
    and the fold's data function); ``data``: its own ``fold_data`` (pseudo-labels)."""
    train: Callable
    config: dict
    code: object = None
    data: Callable | None = None


class _Job:
    """One model on one fold, as a worker process runs it (travels by value)."""

    def __init__(self, name: str, model: Model, fold_data: Callable, fold, unit):
        self.name, self.model, self.fold, self.unit = name, model, fold, unit
        self.fold_data = model.data or fold_data

    def __call__(self, threads: int) -> dict:
        started = time.monotonic()
        data = {**self.fold_data(self.fold), "unit": self.unit}
        result = checked(self.model.train(data, threads), self.fold)
        record = _plain({**result.record, "seconds": round(time.monotonic() - started, 3)})
        oof = {self.name: result.oof}
        test = {self.name: result.test} if len(result.test) else {}
        return as_tensors(Predictions(oof, test, record))


def _plain(record: dict) -> dict:
    """The record in plain Python values (NumPy scalars as numbers): what the cache loads safely."""
    return json.loads(json.dumps(record, default=lambda v: v.item() if hasattr(v, "item") else str(v)))


def cross_validate(cv, models: dict, fold_data: Callable, *, target, metric, test_ids=None,
                   higher_is_better: bool = False, workers: int | None = None) -> CVResult:
    """Every model on every fold of ``cv`` (those not done yet, in worker processes); the
    CV result once all are done (``metric(truth, prediction)`` per model), else the pending
    folds said."""
    code = {name: [model.train, model.data or fold_data] if model.code is None else model.code
            for name, model in models.items()}
    units = {(fold.index, name): fold.sub(name, model.config, code[name])
             for fold in cv.folds for name, model in models.items()}
    for (_, name), unit in list(units.items())[:len(models)]:
        unit.check([models[name].train, models[name].data or fold_data])  # it reads no parameter its key lacks
    jobs = [(unit, _Job(name, models[name], fold_data, cv.folds[k], unit)) for (k, name), unit in units.items()]
    done = workpool.share(cv.context, jobs, workers=workers)
    results = {}
    for fold in cv.folds:
        found = {name: done.get(f"{name}-fold{fold.index}") for name in models}
        if any(part is None for part in found.values()):
            continue
        parts = {name: as_predictions(part) for name, part in found.items() if part is not None}
        results[fold.index] = Predictions(oof={n: p.oof[n] for n, p in parts.items()},
                                          test={n: p.test[n] for n, p in parts.items() if n in p.test},
                                          record={n: p.record for n, p in parts.items()})
    return cv.collect(results, target=target, metric=metric, test_ids=test_ids,
                      higher_is_better=higher_is_better)


def table(result: CVResult, *, higher_is_better: bool) -> list[dict]:
    """A row per model, best first: CV mean, spread, each fold, on all OOF rows; the seconds
    its folds took to train (this session or the one that trained them) and its device."""
    rows = []
    for name, score in result.scores.items():
        records = [result.records[k].get(name, {}) for k in sorted(result.records)]
        devices = sorted({str(r.get("device", "cpu")) for r in records})
        rows.append({"model": name, "cv": score["mean"], "std": score["std"], "oof": score["oof"],
                     **{f"fold{k}": v for k, v in enumerate(score["per_fold"])},
                     "train_s": round(sum(r.get("seconds", 0.0) for r in records), 1),
                     "device": ", ".join(devices)})
    return sorted(rows, key=lambda r: -r["cv"] if higher_is_better else r["cv"])


def importance(result: CVResult, model: str) -> dict:
    """``model``'s feature importance (its records' ``importance``: shares of the gain),
    averaged over the folds, largest first."""
    folds = [result.records[k][model].get("importance", {}) for k in sorted(result.records)]
    names = sorted({f for fold in folds for f in fold})
    mean = {f: float(np.mean([fold.get(f, 0.0) for fold in folds])) for f in names}
    return dict(sorted(mean.items(), key=lambda kv: -kv[1]))
