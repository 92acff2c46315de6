"""Cross-validation that outlives a session: folds as units, out-of-fold predictions kept.

``CrossValidation(run, name, splitter, ...)`` splits the rows with one of scikit-learn's
splitters (``KFold``, ``StratifiedKFold``, ``GroupKFold``, ``TimeSeriesSplit``: never
written again; ``Grouped`` applies one to the distinct values of a group, such as dates) and
saves the split with the run, so every kernel version sees the same folds (found again in the
working dir or the previous version's output). ``cv.run(train_fold, ...)``
treats each fold as a unit of work, like a fit:

- done once: its predictions are cached (``run.cached``), later versions skip it (a hit);
- resumable: a fold cut short by the session's end left its checkpoints (``fold.name`` is its
  checkpoints' name) and the next version resumes it mid-way;
- budgeted: before a fold the run checks that the session's time left holds it (its duration
  estimated from the folds before), and stops cleanly if not, saying which folds remain for the
  next version; ``per_version`` caps the folds one version trains.

When every fold is done: the out-of-fold predictions (``oof.parquet``: id, fold, target and a
column per model, a row per predicted value) and the test predictions (``test.parquet``: their
mean over the folds; ``test_fold<k>.npy`` per fold) are written in formats that cannot run code,
with the CV score per fold, their mean and spread, and the score of the concatenated OOF
predictions, which is what blends across kernels are fitted on. No CV score exists before then.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np


@dataclass
class Fold:
    """One fold: its index, its rows (``train``, ``val``: positions), the name of its units
    (checkpoints, cache entry: ``<cv name>-fold<k>``)."""
    index: int
    train: np.ndarray
    val: np.ndarray
    name: str


class FoldUnfinished(Exception):
    """A fold's training stopped before its end (the session's time): not done, not cached."""


@dataclass
class CVResult:
    complete: bool
    done: list
    pending: list
    message: str
    oof: dict = field(default_factory=dict)  # model -> (rows, ...) predictions, NaN where unseen
    test: dict = field(default_factory=dict)  # model -> mean test prediction over the folds
    scores: dict = field(default_factory=dict)  # model -> {"per_fold", "mean", "std", "oof"}


def _ranges(indices: list[int]) -> str:
    if not indices:
        return "none"
    parts, start = [], indices[0]
    for a, b in zip(indices, indices[1:] + [None]):
        if b != a + 1:
            parts.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(parts)


class Grouped:
    """A scikit-learn splitter applied to the distinct values of ``groups`` (sorted), every row
    of a value then following it: ``Grouped(TimeSeriesSplit(5))`` over the forecast windows of
    several series, grouped by their time stamp, never validates on a date it also trains on
    (scikit-learn's own ``TimeSeriesSplit`` splits rows by position, and windows of different
    series at one date straddle its cuts; its ``GroupKFold`` has no order in time)."""

    def __init__(self, splitter):
        self.splitter = splitter

    def __repr__(self) -> str:
        return f"Grouped({self.splitter!r})"

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return self.splitter.get_n_splits()

    def split(self, X, y=None, groups=None):
        if groups is None:
            raise ValueError("Grouped(...) splits the distinct values of groups: pass groups= "
                             "(e.g. each row's time stamp) to CrossValidation")
        values, which = np.unique(np.asarray(groups), return_inverse=True)
        for train, val in self.splitter.split(np.zeros((len(values), 1))):
            yield np.flatnonzero(np.isin(which, train)), np.flatnonzero(np.isin(which, val))


class CrossValidation:
    """The folds of one run, and their work.

    Args:
        run: the run context (cache, checkpoints, budget, output folder).
        name: names the split's folder (``folds/<name>-<key>``) and each fold's units.
        splitter: a scikit-learn splitter; its ``split(X, y, groups)`` is called on ``n`` rows.
        n / y / groups: the rows, their labels (stratified splits) and groups (grouped ones).
        ids: one id per row (what blends align on); default: the row's position.
    """

    def __init__(self, run, name: str, splitter, *, n: int, y=None, groups=None, ids=None):
        from ..state.cache import fingerprint
        self.context, self.splitter, self.n = run, splitter, n
        self.ids = np.asarray(ids if ids is not None else np.arange(n)).astype(str)
        key = fingerprint([repr(splitter), n, _array(y), _array(groups), list(self.ids)])[:10]
        self.name, self.key = name, key
        self.folder = Path(run.output_dir) / "folds" / f"{name}-{key}"
        self._written = None  # (target, test ids) of the OOF files once every fold is done
        self.folds = self._load_or_split(y, groups)

    def _load_or_split(self, y, groups) -> list[Fold]:
        from ..machine import env
        from ..state import atomic
        saved = self.folder / "split.npz"
        found = [saved] if saved.exists() else [p for p in env.find_inputs(f"folds/{self.folder.name}/split.npz")]
        if found:
            with np.load(found[0], allow_pickle=False) as parts:
                pairs = [(parts[f"train_{k}"], parts[f"val_{k}"]) for k in range(len(parts.files) // 2)]
        else:
            pairs = [(np.asarray(a), np.asarray(b)) for a, b in
                     self.splitter.split(np.zeros((self.n, 1)), _array(y), _array(groups))]
        if not saved.exists():  # written here too: the next version finds it in this output
            arrays = {f"{part}_{k}": idx for k, pair in enumerate(pairs) for part, idx in zip(("train", "val"), pair)}
            with atomic.atomic_path(saved) as tmp:
                with open(tmp, "wb") as f:
                    np.savez(f, **arrays)
        return [Fold(k, tr, va, f"{self.name}-fold{k}") for k, (tr, va) in enumerate(pairs)]

    def train_folds(self, train_fold: Callable[[Fold], dict | None], *, config: dict, data=None,
                  code=None, per_version: int = 0) -> dict:
        """``train_fold(fold) -> {"oof": {model: val predictions}, "test": {model: ...}}`` (None
        when its training stopped before the end) for every fold not done yet, within the
        budget; ``{fold index: result}`` of the done ones."""
        results, spent = {}, []
        for fold in self.folds:
            fold_config = {**config, "fold": fold.index, "split": self.key}
            cached = self.context.cache.has(fold.name, fold_config, data=data, code=code)
            if not cached and not self._fits(spent, per_version):
                break
            started = time.monotonic()
            try:
                value = self.context.cached(fold.name, fold_config, lambda f=fold: _done(train_fold(f), f),
                                        data=data, code=code)
            except FoldUnfinished as stopped:
                print(f"kagglekit folds: {stopped}")
                break
            if not cached:
                spent.append(time.monotonic() - started)
            results[fold.index] = _as_arrays(value)
        return results

    def _fits(self, spent: list, per_version: int) -> bool:
        """Is there room in this session for one more fold?"""
        if per_version and len(spent) >= per_version:
            return False
        estimate = statistics.median(spent) if spent else self._previous_seconds()
        return estimate is None or self.context.budget().allows(1.2 * estimate)

    def _previous_seconds(self) -> float | None:
        """How long a fold took when an earlier session trained it (the cache keeps it)."""
        seconds = [e.get("seconds_saved") for e in self.context.cache.events
                   if e["name"].startswith(f"{self.name}-fold") and e.get("hit")]
        return statistics.median(seconds) if seconds else None

    def run(self, train_fold: Callable[[Fold], dict | None], *, config: dict, target=None,
                 metric=None, test_ids=None, data=None, code=None, per_version: int = 0,
                 higher_is_better: bool = False) -> CVResult:
        """Train the folds (see ``train_folds``); when all are done, the OOF and test predictions
        written (test rows named by ``test_ids``) and scored with ``metric(truth, prediction)``
        against ``target`` (per row)."""
        results = self.train_folds(train_fold, config=config, data=data, code=code, per_version=per_version)
        done = sorted(results)
        pending = [f.index for f in self.folds if f.index not in results]
        count = len(self.folds)
        if pending:
            message = (f"folds {_ranges(done)} of {count} done, {_ranges(pending)} next version: "
                       "no CV score until every fold is done")
            self.context.log(**{f"cv_{self.name}": {"folds": count, "done": done, "pending": pending}})
            self.context.chain.update({f"cache:{self.name}-fold{k}": "pending" for k in pending})
            print(f"kagglekit folds: {self.name}: {message}")
            return CVResult(False, done, pending, message)
        oof, test = self._assemble(results)
        scores = _scores(oof, self.folds, _array(target), metric) if metric is not None else {}
        self._written = (_array(target), test_ids)
        self._write(oof, test, results, _array(target), test_ids)
        message = f"all {count} folds done"
        self.context.log(**{f"cv_{self.name}": {"folds": count, "done": done, "pending": [],
                                             "scores": scores, "higher_is_better": higher_is_better}})
        print(f"kagglekit folds: {self.name}: {message}")
        return CVResult(True, done, [], message, oof, test, scores)

    def add(self, result: CVResult, model: str, oof, test=None) -> None:
        """A prediction made from the folds' own (an ensemble whose weights were fitted on the
        OOF predictions) written beside theirs in oof.parquet / test.parquet: what a blend of
        kernels reads when that is what the notebook submits."""
        if not result.complete:
            raise ValueError("add() needs every fold done: the OOF file does not exist yet")
        result.oof[model] = np.asarray(oof, dtype=np.float64)
        if test is not None:
            result.test[model] = np.asarray(test, dtype=np.float64)
        target, test_ids = self._written
        self._write(result.oof, result.test, {}, target, test_ids)

    def _assemble(self, results: dict) -> tuple[dict, dict]:
        models = list(results[self.folds[0].index]["oof"])
        oof, test = {}, {}
        for model in models:
            first = np.asarray(results[0]["oof"][model])
            out = np.full((self.n, *first.shape[1:]), np.nan, dtype=np.float64)
            for fold in self.folds:
                out[fold.val] = results[fold.index]["oof"][model]
            oof[model] = out
            parts = [results[f.index]["test"][model] for f in self.folds if model in results[f.index].get("test", {})]
            if parts:
                test[model] = np.mean(np.stack(parts), axis=0)
        return oof, test

    def _write(self, oof: dict, test: dict, results: dict, target, test_ids) -> None:
        """oof.parquet / test.parquet in the output root (what a blend kernel attaches)."""
        import pandas as pd

        from ..state import atomic
        seen = ~np.isnan(next(iter(oof.values())).reshape(self.n, -1)).all(1)
        fold_of = np.full(self.n, -1)
        for fold in self.folds:
            fold_of[fold.val] = fold.index
        frame = _long(self.ids[seen], {m: v[seen] for m, v in oof.items()},
                      target[seen] if target is not None else None)
        frame.insert(2, "fold", np.repeat(fold_of[seen], len(frame) // max(int(seen.sum()), 1)))
        out = Path(self.context.output_dir)
        with atomic.atomic_path(out / "oof.parquet") as tmp:
            frame.to_parquet(tmp, index=False)
        if test:
            rows = len(next(iter(test.values())))
            names = np.asarray(test_ids if test_ids is not None else np.arange(rows)).astype(str)
            with atomic.atomic_path(out / "test.parquet") as tmp:
                _long(names, test, None).to_parquet(tmp, index=False)
            for k, result in results.items():
                for model, values in result.get("test", {}).items():
                    with atomic.atomic_path(self.folder / f"test_fold{k}_{model}.npy") as tmp:
                        with open(tmp, "wb") as f:
                            np.save(f, np.asarray(values))


def _long(ids: np.ndarray, predictions: dict, target) -> "pd.DataFrame":
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


def _scores(oof: dict, folds: list, target, metric) -> dict:
    """Per model: the metric on each fold's rows, their mean and spread, and on all OOF rows."""
    out = {}
    for model, values in oof.items():
        per_fold = [float(metric(target[f.val], values[f.val])) for f in folds]
        seen = ~np.isnan(values.reshape(len(values), -1)).all(1)
        out[model] = {"per_fold": per_fold, "mean": statistics.fmean(per_fold),
                      "std": statistics.pstdev(per_fold), "oof": float(metric(target[seen], values[seen]))}
    return out


def _array(values):
    if values is None:
        return None
    if hasattr(values, "detach"):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def _done(result: dict | None, fold: Fold) -> dict:
    """A fold's predictions, as tensors the cache keeps safely; a fold whose training did not
    finish raises FoldUnfinished (nothing is cached: the next version resumes it)."""
    if result is None:
        raise FoldUnfinished(f"{fold.name} stopped before the end of its training: the next "
                             "version resumes it from its checkpoint")
    return _as_tensors(result)


def _as_tensors(result: dict) -> dict:
    import torch
    return {part: {m: torch.as_tensor(np.asarray(v, dtype=np.float64)) for m, v in models.items()}
            for part, models in result.items()}


def _as_arrays(result: dict) -> dict:
    return {part: {m: np.asarray(v) for m, v in models.items()} for part, models in result.items()}
