"""A second-level model on out-of-fold predictions, with a CV of its own.

The features are the models' OOF predictions (a classifier's probabilities as logits, where a
linear model combines them; per class for several classes); the stacker is a ridge regression
(regression) or a logistic regression (classes), both scikit-learn's, their regularisation chosen
by an inner CV. Its score is honest: each
fold's rows are predicted by a stacker fitted on the other folds' rows only (the same folds the
models were cross-validated on), and the test rows by one fitted on every OOF row.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scoring import EPS

TUNE_ROWS = 20_000  # rows the logistic stacker's C is chosen on (each outer fold its own)
CS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)


@dataclass
class Stack:
    oof: np.ndarray  # honest predictions of the OOF rows
    test: np.ndarray | None
    coefficients: dict  # model -> its coefficient(s) in the stacker fitted on every row


def features(predictions: dict, task: str) -> np.ndarray:
    """(rows, models [x classes]): values as they are, probabilities as logits."""
    columns = []
    for values in predictions.values():
        values = np.asarray(values, dtype=np.float64)
        if task != "regression":
            p = np.clip(values, EPS, 1 - EPS)
            values = np.log(p / (1 - p)) if task == "binary" else np.log(p)
        columns.append(values.reshape(len(values), -1))
    return np.concatenate(columns, axis=1)


def _fitted(task: str, x: np.ndarray, y: np.ndarray, seed: int):
    """The stacker fitted on ``x``: ridge with its alpha by leave-one-out (RidgeCV); logistic
    regression with its C chosen by a 3-fold CV on at most ``TUNE_ROWS`` of these rows (an
    unregularised stack of many correlated OOFs overfits: measured 0.412 against 0.432 MAP@3)."""
    from sklearn.linear_model import LogisticRegression, RidgeCV
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    if task == "regression":
        return make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13))).fit(x, y)

    def logistic(c: float):
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000, random_state=seed))
    rows = np.random.default_rng(seed).permutation(len(x))[:TUNE_ROWS]
    losses = {c: -cross_val_score(logistic(c), x[rows], y[rows], cv=3, scoring="neg_log_loss").mean()
              for c in CS}
    return logistic(min(losses, key=lambda c: losses[c])).fit(x, y)


def _predict(model, x, task: str) -> np.ndarray:
    if task == "regression":
        return model.predict(x)
    proba = model.predict_proba(x)
    return proba[:, 1] if task == "binary" else proba


def stack(oof: dict, y, fold_of, task: str, test: dict | None = None, seed: int = 0) -> Stack:
    """The stacker's honest OOF predictions over ``oof`` (model -> predictions, rows validated
    by fold ``fold_of``), and its test predictions from ``test`` (the same models)."""
    x, y, fold_of = features(oof, task), np.asarray(y), np.asarray(fold_of)
    out = np.full((len(x), *np.asarray(next(iter(oof.values()))).shape[1:]), np.nan)
    for k in np.unique(fold_of[fold_of >= 0]):
        fit, held = (fold_of != k) & (fold_of >= 0), fold_of == k
        out[held] = _predict(_fitted(task, x[fit], y[fit], seed), x[held], task)
    seen = fold_of >= 0
    final = _fitted(task, x[seen], y[seen], seed)
    coef = np.atleast_2d(final[-1].coef_)
    width = coef.shape[1] // len(oof)
    coefficients = {m: coef[:, i * width:(i + 1) * width].round(4).tolist() for i, m in enumerate(oof)}
    predicted = _predict(final, features(test, task), task) if test else None
    return Stack(out, predicted, coefficients)
