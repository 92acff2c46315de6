"""Cross-validation that outlives a session: folds as units, out-of-fold predictions kept.

``CrossValidation(run, name, splitter, ...)`` splits the rows with one of scikit-learn's
splitters (``KFold``, ``StratifiedKFold``, ``GroupKFold``, ``TimeSeriesSplit``: never
written again; ``Grouped`` applies one to the distinct values of a group, such as dates;
``Holdout`` is the data's own single split, so that one fold runs the cells five folds run) and
saves the split with the run, so every kernel version sees the same folds (found again in the
working dir or the previous version's output). Each fold is a unit of work (``fold.unit``: its
config, by default the run's parameters, ``data``, ``code`` and the fold's rows), and
``cv.run(train_fold, ...)`` does the units:

- done once: a fold's ``Predictions`` are its unit's cached result, later versions skip it (a
  hit, its finished checkpoints carried into the new output);
- resumable: a fit given ``fold.unit.checkpoints()`` (or a sub-unit's) raises ``kk.Unfinished``
  when the session's time cuts it short; the fold is left for the next version, which resumes
  it mid-way;
- budgeted: before a fold its unit checks that the session's time left holds it (its duration
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..state import keys
from . import oofio, turns
from .foldresults import CVResult, Predictions
from .splitters import Grouped, Holdout, as_array  # noqa: F401 (kk.folds.Holdout, kk.folds.Grouped)
from .unit import Unit


@dataclass
class Fold:
    """One fold: its index, its rows (``train``, ``val``: positions), its name
    (``<cv name>-fold<k>``) and its unit of work (``unit``: cache entry, checkpoints, study)."""
    index: int
    train: np.ndarray
    val: np.ndarray
    name: str
    unit: Unit = None  # type: ignore[assignment]  # set by CrossValidation as it makes the fold

    def masks(self, rows, size: int):
        """Its training and validation rows as two boolean masks over ``size`` items, when the
        folds split ``rows`` (a subset of them: a graph's labelled nodes)."""
        import torch
        rows = torch.as_tensor(np.asarray(rows))
        empty = torch.zeros(size, dtype=torch.bool)
        return tuple(empty.index_fill(0, rows[torch.as_tensor(part)], True) for part in (self.train, self.val))

    def sub(self, name: str, config: dict | None = None, code=None, leave_out: dict | None = None):
        """A training inside this fold as a unit of its own (``<name>-fold<k>``): the fold's
        data and rows, the parameters ``code`` reads (else the fold's code), the values ``config``
        hands it, so that one model's parameters changed retrain that model only."""
        fold = self.unit
        handed = {k: v for k, v in fold.config.items() if k not in fold.reads}  # the fold's own values
        values = {**(handed if config is None else config), "fold": self.index, "split": fold.config["split"]}
        return Unit.keyed(fold.run, f"{name}-fold{self.index}", values, fold.fingerprint,
                          fold.code if code is None else code, fold.left_out if leave_out is None else leave_out)


def _ranges(indices: list[int]) -> str:
    if not indices:
        return "none"
    parts, start = [], indices[0]
    for a, b in zip(indices, [*indices[1:], None]):
        if b != a + 1:
            parts.append(f"{start}" if start == a else f"{start}-{a}")
            start = b  # type: ignore[assignment]  # None only past the last
    return ", ".join(parts)


class CrossValidation:
    """The folds of one run, and their work.

    Args:
        run: the run context (cache, checkpoints, budget, output folder).
        name: names the split's folder (``folds/<name>-<key>``) and each fold's unit.
        splitter: a scikit-learn splitter; its ``split(X, y, groups)`` is called on ``n`` rows.
        n / y / groups: the rows, their labels (stratified splits) and groups (grouped ones).
        ids: one id per row (what blends align on); default: the row's position.
        code / data / config / leave_out: each fold unit's identity beside the fold (``run.unit``):
            the parameters the code that trains a fold reads (every one without code), the data's
            content, the values handed to it (the searched parameters) and the parameters left
            out by name, with the reason.
    """

    def __init__(self, run, name: str, splitter, *, n: int, y=None, groups=None, ids=None,
                 code=None, data=None, config: dict | None = None, leave_out: dict | None = None):
        self.context, self.splitter, self.n = run, splitter, n
        self.ids = np.asarray(ids if ids is not None else np.arange(n)).astype(str)
        split = keys.derive(repr(splitter), n, keys.fingerprint([as_array(y), as_array(groups), list(self.ids)]))
        self.name, self.key = name, split
        self.folder = Path(run.output_dir) / "folds" / f"{name}-{split}"
        # (target, test ids) of the OOF files once every fold is done
        self._written: tuple[np.ndarray, object] | None = None
        self.folds = self._load_or_split(y, groups)
        content = keys.fingerprint(data) if data is not None else ""  # once for every fold
        for fold in self.folds:
            values = {**(config or {}), "fold": fold.index, "split": split}
            fold.unit = Unit.keyed(run, fold.name, values, content, code, leave_out)

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
                     self.splitter.split(np.zeros((self.n, 1)), as_array(y), as_array(groups))]
        if not saved.exists():  # written here too: the next version finds it in this output
            arrays = {f"{part}_{k}": idx for k, pair in enumerate(pairs) for part, idx in zip(("train", "val"), pair)}
            with atomic.atomic_path(saved) as tmp:
                with open(tmp, "wb") as f:
                    np.savez(f, **arrays)
        return [Fold(k, tr, va, f"{self.name}-fold{k}") for k, (tr, va) in enumerate(pairs)]

    def train_folds(self, train_fold: Callable[[Fold], Predictions], *, per_version: int = 0) -> dict:
        """``train_fold(fold) -> Predictions`` for every fold not done yet, in turn within the
        session's time (``turns.in_turn``); ``{fold index: Predictions}`` of the done ones."""
        for fold in self.folds[:1]:
            fold.unit.check(train_fold)  # it reads no parameter the folds' key lacks
        jobs = [(fold.unit, fold) for fold in self.folds]
        train = lambda unit, fold: unit.cached(lambda: as_tensors(timed(train_fold, fold)))  # noqa: E731
        done = turns.in_turn(jobs, train, who="folds", earlier_s=self._previous_seconds(), per_version=per_version)
        by_unit = {fold.unit.name: fold.index for fold in self.folds}
        return {by_unit[unit.name]: as_predictions(value) for unit, value in done}

    def _previous_seconds(self) -> float | None:
        """How long a fold took when an earlier session trained it (the cache keeps it)."""
        seconds = [e.get("seconds_saved") for e in self.context.cache.events
                   if e["name"].startswith(f"{self.name}-fold") and e.get("hit")]
        return statistics.median(seconds) if seconds else None

    def run(self, train_fold: Callable[[Fold], Predictions], *, target=None, metric=None, test_ids=None,
            per_version: int = 0, higher_is_better: bool = False) -> CVResult:
        """Train the folds (see ``train_folds``); when all are done, the OOF and test predictions
        written (test rows named by ``test_ids``) and scored with ``metric(truth, prediction)``
        against ``target`` (per row)."""
        results = self.train_folds(train_fold, per_version=per_version)
        return self.collect(results, target=target, metric=metric, test_ids=test_ids,
                            higher_is_better=higher_is_better)

    def collect(self, results: dict, *, target=None, metric=None, test_ids=None,
                higher_is_better: bool = False) -> CVResult:
        """The CV result of ``results`` ({fold index: {"oof", "test", "record"}} of the folds
        done, however they were trained): pending folds said and logged; when all are done,
        the OOF and test predictions written and scored."""
        done = sorted(results)
        pending = [f.index for f in self.folds if f.index not in results]
        count = len(self.folds)
        if pending:
            message = (f"folds {_ranges(done)} of {count} done, {_ranges(pending)} next version: "
                       "no CV score until every fold is done")
            self.context.log(**{f"cv_{self.name}": {"folds": count, "done": done, "pending": pending}})
            self.context.chain.update({f"cache:{self.name}-fold{k}": "pending" for k in pending})
            self.context.log(chain=self.context.chain)  # also when no fold was computed this session
            print(f"kagglekit folds: {self.name}: {message}")
            return CVResult(False, done, pending, message)
        oof, test = self._assemble(results)
        scores = oofio.scores(oof, [f.val for f in self.folds], as_array(target), metric) if metric is not None else {}
        self._written = (as_array(target), test_ids)
        self._write(oof, test, results, as_array(target), test_ids)
        message = f"all {count} folds done"
        self.context.log(**{f"cv_{self.name}": {"folds": count, "done": done, "pending": [],
                                             "scores": scores, "higher_is_better": higher_is_better}})
        print(f"kagglekit folds: {self.name}: {message}")
        records = {k: r.record for k, r in results.items()}
        return CVResult(True, done, [], message, oof, test, scores, records,
                        {k: r.test for k, r in results.items()}, higher_is_better)

    def predict_test(self, result: CVResult, predict: Callable[[Fold], dict], *, data) -> CVResult:
        """The test set (``data``: its files) predicted by every finished fold apart from its training,
        ``predict(fold)`` restoring its weights: a new test set trains nothing (``foldtest``)."""
        from .foldtest import predict_test
        return predict_test(self, result, predict, data)

    def add(self, result: CVResult, model: str, oof, test=None) -> None:
        """A prediction made from the folds' own (an ensemble whose weights were fitted on the
        OOF predictions) written beside theirs in oof.parquet / test.parquet: what a blend of
        kernels reads when that is what the notebook submits."""
        if not result.complete:
            raise ValueError("add() needs every fold done: the OOF file does not exist yet")
        result.oof[model] = np.asarray(oof, dtype=np.float64)
        if test is not None:
            result.test[model] = np.asarray(test, dtype=np.float64)
        assert self._written is not None, "a complete CV's OOF files are written"
        target, test_ids = self._written
        self._write(result.oof, result.test, {}, target, test_ids)

    def ensemble(self, result: CVResult, name: str = "ensemble") -> dict:
        """The models' non-negative weights summing to one, fitted in squared error
        (``blend.nnls_weights``) on the rows the folds validated against the target ``run`` was
        given; the weighted OOF and test predictions added as ``name`` (``add``). {model: weight},
        also printed."""
        from ..submit.blend import nnls_weights
        if not result.complete:
            raise ValueError("ensemble() needs every fold done: its weights are fitted on every fold's rows")
        models = [m for m in result.oof if m != name]
        flat = {m: result.oof[m].reshape(self.n, -1) for m in models}
        seen = ~np.isnan(np.stack(list(flat.values()))).any(axis=(0, 2))
        assert self._written is not None, "a complete CV's OOF files are written"
        target = self._written[0].reshape(self.n, -1)[seen]
        weights = nnls_weights(np.stack([flat[m][seen].reshape(-1) for m in models], 1), target.reshape(-1))
        mix = lambda preds: sum(w * preds[m] for w, m in zip(weights, models))  # noqa: E731
        self.add(result, name, mix(result.oof), mix(result.test) if set(models) <= set(result.test) else None)
        print(f"kagglekit folds: {name} weights, fitted out of fold: "
              + ", ".join(f"{m} {w:.2f}" for m, w in zip(models, weights)))
        return dict(zip(models, weights.tolist()))

    def _assemble(self, results: dict) -> tuple[dict, dict]:
        models = list(results[self.folds[0].index].oof)
        oof, test = {}, {}
        for model in models:
            first = np.asarray(results[self.folds[0].index].oof[model])
            out = np.full((self.n, *first.shape[1:]), np.nan, dtype=np.float64)
            for fold in self.folds:
                out[fold.val] = results[fold.index].oof[model]
            oof[model] = out
            parts = [results[f.index].test[model] for f in self.folds if model in results[f.index].test]
            if parts:
                test[model] = np.mean(np.stack(parts), axis=0)
        return oof, test

    @property
    def fold_of(self) -> np.ndarray:
        """Each row's validating fold (-1: a row no fold validates)."""
        fold_of = np.full(self.n, -1)
        for fold in self.folds:
            fold_of[fold.val] = fold.index
        return fold_of

    def _write(self, oof: dict, test: dict, results: dict, target, test_ids) -> None:
        """oof.parquet / test.parquet in the output root (what a blend kernel attaches)."""
        oofio.write(Path(self.context.output_dir), self.folder, self.ids, self.fold_of, oof, test,
                    results, target, test_ids)


def timed(train_fold: Callable[[Fold], Predictions], fold: Fold) -> Predictions:
    """``train_fold(fold)``, its seconds in the record (``seconds``, unless the training put its own there):
    kept with the fold's predictions, so a later version's scoring-rerun plan reads what the training took."""
    started = time.monotonic()
    result = checked(train_fold(fold), fold)
    result.record.setdefault("seconds", time.monotonic() - started)
    return result


def checked(result, fold: Fold) -> Predictions:
    if not isinstance(result, Predictions):
        raise TypeError(f"train_fold({fold.name}) returned {type(result).__name__}: return "
                        "kk.folds.Predictions(oof=..., test=..., record=...) (a training on every GPU: "
                        "rank 0's, as run.launch hands it back); a training the session's time cut short "
                        "raises kk.Unfinished (a fit with the fold unit's checkpoints does)")
    return result


def as_tensors(result: Predictions) -> dict:
    """Predictions as float64 tensors for the cache; the record's plain values as they are, its arrays as
    tensors (a cache entry loads with ``weights_only=True``, which refuses a pickled numpy array: such an
    entry would be recomputed on every run)."""
    import torch
    def tensors(models: dict | np.ndarray) -> dict:
        if not isinstance(models, dict):
            raise TypeError("a fold's kk.folds.Predictions name their models: oof={'model': predictions}, "
                            "test={'model': predictions}")
        return {m: torch.as_tensor(np.asarray(v, dtype=np.float64)) for m, v in models.items()}
    return {"oof": tensors(result.oof), "test": tensors(result.test), "record": _loadable(result.record),
            "labelled": tensors(result.labelled)}


def _loadable(value):
    """``value`` with every numpy array in it (in dicts, lists and tuples) a tensor."""
    import torch
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":  # numbers (an object array stays)
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, dict):
        return {k: _loadable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_loadable(v) for v in value)
    return value


def as_predictions(stored) -> Predictions:
    """A fold's cached predictions (``as_tensors``'s form) back as ``Predictions`` of arrays."""
    arrays = lambda models: {m: np.asarray(v) for m, v in models.items()}  # noqa: E731
    return Predictions(arrays(stored["oof"]), arrays(stored.get("test", {})), stored.get("record", {}),
                       arrays(stored.get("labelled", {})))
