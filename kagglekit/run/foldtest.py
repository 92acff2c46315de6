"""A cross-validation's test predictions made apart from its folds' training.

A fold's unit is keyed by what it trains on, and the test files are not among that (a new test
set must not train the folds again). A fold that returned its test predictions with its OOF
therefore handed back, from its cache, the test set of the version that trained it: a
competition whose test folder was updated, or Kaggle's scoring rerun with its hidden test,
got the old rows (the image notebook stopped on a length mismatch, 3,490 rows against 4,490).

``predict_test``: every fold's finished model predicts the test set in one unit keyed by the
folds' own keys, the test files and the prediction's code. A new test set is predicted by the
trained folds, nothing trains; the next version with the same test reads the unit.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .foldresults import CVResult


def predict_test(cv, result: CVResult, predict: Callable, data) -> CVResult:
    """``result`` with ``fold_test`` (fold -> ``predict(fold)``: {model: its test predictions}, the
    fold's finished weights restored from its checkpoints) and ``test`` (their mean over the folds)
    set and written beside the OOF predictions (test.parquet). ``data``: the test files (their
    content keys the unit). Before every fold is done: ``result`` as it is."""
    if not result.complete:
        return result
    import torch
    unit = cv.context.unit(f"{cv.name}-test", code=predict, data=data, config={"folds": [f.unit.key for f in cv.folds]})
    stored = unit.cached(lambda: [{m: torch.as_tensor(np.asarray(v, dtype=np.float64)) for m, v in predict(f).items()}
                                  for f in cv.folds])
    result.fold_test = {f.index: {m: np.asarray(v) for m, v in got.items()} for f, got in zip(cv.folds, stored)}
    models = list(result.fold_test[cv.folds[0].index])
    unseen = [m for m in models if m not in result.oof]
    if unseen:
        raise ValueError(f"{cv.name}: predict(fold) names {unseen}, which the folds' OOF predictions lack "
                         f"({sorted(result.oof)}): a test prediction is written beside its model's OOF")
    for model in models:
        cv.add(result, model, result.oof[model], np.mean([result.fold_test[f.index][model] for f in cv.folds], axis=0))
    return result
