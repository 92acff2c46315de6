"""Scores of several labels per row: ``Y`` (N, L) of 0/1, ``P`` (N, L) of independent probabilities.

The two ways multi-label competitions are scored on Kaggle:

- the mean over the labels of each label's ROC AUC (RANZCR CLiP, CheXpert-style chest X-ray
  sets, Jigsaw toxic comments): a probability per label column, no threshold; BirdCLEF's metric
  too, so ``metrics.macro_roc_auc`` is it (a label no row shows is left out of the mean);
- ``samples_f1``: each row's F1 between the labels predicted (probability above a threshold) and
  its true labels, averaged over the rows (Human Protein Atlas' and Planet's submissions list the
  labels; their metrics are F-scores). The threshold is one number for every label, chosen on the
  out-of-fold predictions (``best_threshold``) and applied to the test: scored at the threshold
  that is best on the very rows scored, F1 is a hair optimistic (one parameter over thousands of
  rows), which ``Metric.score`` says.
"""
from __future__ import annotations

import numpy as np

from ..readers.labelsets import predicted

THRESHOLDS = np.round(np.arange(0.05, 0.951, 0.05), 2)  # the grid best_threshold searches


def samples_f1(y, p, threshold: float) -> float:
    """Each row's F1 of the labels above ``threshold`` against its true ones, averaged; a row
    predicting no label gets its most probable one (``readers.labelsets.predicted``)."""
    y, chosen = np.asarray(y).astype(bool), predicted(p, threshold)
    hits = (y & chosen).sum(1)
    return float(np.mean(np.where(y.sum(1) + chosen.sum(1) > 0, 2 * hits / np.maximum(y.sum(1) + chosen.sum(1), 1),
                                  1.0)))


def best_threshold(y, p) -> float:
    """The threshold of ``THRESHOLDS`` with the best samples F1 on these rows (the lowest on a tie)."""
    scores = [samples_f1(y, p, t) for t in THRESHOLDS]
    return float(THRESHOLDS[int(np.argmax(scores))])


def on_folds(make, x: np.ndarray, y: np.ndarray, x_test: np.ndarray, folds) -> tuple[np.ndarray, np.ndarray]:
    """``make()``, a multi-label estimator (``OneVsRestClassifier(...)``), fitted on each fold's training
    rows of ``x`` against the labels ``y`` (N, L) of 0/1 that those rows show (one no training row shows
    cannot be learned: it scores 0): its out-of-fold probabilities, and the mean of its folds'
    probabilities of ``x_test``."""
    y = np.asarray(y).astype(bool)
    oof, test = np.zeros(y.shape), []
    for fold in folds:
        shown = y[fold.train].any(0)
        fitted = make().fit(x[fold.train], y[fold.train][:, shown])
        oof[np.ix_(fold.val, shown)] = fitted.predict_proba(x[fold.val])
        test.append(np.zeros((len(x_test), y.shape[1])))
        if len(x_test):
            test[-1][:, shown] = fitted.predict_proba(x_test)
    return oof, np.mean(test, axis=0)
