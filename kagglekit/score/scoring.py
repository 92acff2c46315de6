"""A tabular competition's metric by name: its direction, the predictions it scores, and the
submission form it needs.

Predictions inside the kit are always the fullest form a model gives, so every metric, blend and
stack works on the same arrays: a regression's value (``rmsle``: in log1p space, where it is
an RMSE, ``to_space`` / ``from_space``), a binary task's probability of class 1 (N,), a
multiclass task's probabilities (N, C), several labels' independent probabilities (N, L) against
their 0/1 matrix (``score.multilabel``). ``Metric.score`` is scikit-learn's own definition on
them; ``Metric.batch`` scores many candidate predictions at once in torch (the hill climb's
inner loop, on the GPU where there is one) and agrees with ``score`` (tests/test_tabular.py).
``Metric.submission`` turns probabilities into what the competition reads: a probability, a
label in the competition's own words, or three labels in order (MAP@3).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import metrics, multilabel

EPS = 1e-7  # probabilities are clipped here before a log (a negative-weight blend may leave [0, 1])
REGRESSION = ("rmse", "rmsle", "mae", "r2")
CLASSIFICATION = ("auc", "logloss", "accuracy", "map@3")
MULTILABEL = ("auc", "f1")  # several labels per row


class MetricError(ValueError):
    """A metric name the kit does not know, or one that does not fit the target."""


@dataclass(frozen=True)
class Metric:
    name: str
    task: str  # "regression", "binary", "multiclass" or "multilabel"
    higher_is_better: bool

    @property
    def direction(self) -> str:
        return "maximize" if self.higher_is_better else "minimize"

    def better(self, a: float, b: float) -> bool:
        return a > b if self.higher_is_better else a < b

    def to_space(self, y: np.ndarray) -> np.ndarray:
        """The target where the models learn and blend (log1p for RMSLE; as is otherwise)."""
        return np.log1p(y) if self.name == "rmsle" else y

    def from_space(self, pred: np.ndarray) -> np.ndarray:
        return np.expm1(pred) if self.name == "rmsle" else pred

    def score(self, y, pred) -> float:
        """scikit-learn's score of ``pred`` (the kit's form, in the learning space) for ``y``
        (class indices, or the target in the learning space)."""
        from sklearn import metrics as m
        y, pred = np.asarray(y), np.asarray(pred, dtype=np.float64)
        if self.task == "multilabel":  # y (N, L) of 0/1, pred (N, L) of independent probabilities
            if self.name == "auc":
                return metrics.macro_roc_auc(pred, y)  # BirdCLEF's too: a label no row shows is left out
            return multilabel.samples_f1(y, pred, multilabel.best_threshold(y, pred))  # at its best threshold
        if self.task == "regression":
            if self.name == "mae":
                return float(m.mean_absolute_error(y, pred))
            if self.name == "r2":
                return float(m.r2_score(y, pred))
            return float(np.sqrt(m.mean_squared_error(y, pred)))  # rmse; rmsle in log1p space
        proba = _two_columns(pred) if self.task == "binary" else pred
        if self.name == "auc":
            ranked = proba[:, 1] if self.task == "binary" else pred  # scikit-learn ranks one column for two classes
            return float(m.roc_auc_score(y, ranked, multi_class="ovr"))
        if self.name == "logloss":
            clipped = np.clip(proba, EPS, 1 - EPS)
            return float(m.log_loss(y, clipped / clipped.sum(1, keepdims=True), labels=np.arange(proba.shape[1])))
        if self.name == "accuracy":
            return float(m.accuracy_score(y, proba.argmax(1)))
        return _map_at_3(y, proba)

    def check_sample(self, sample, column: str) -> None:
        """Refused before any training: a metric whose submission ``column`` of the sample (a few of its
        rows, as read) cannot hold, naming ``metric`` (the check of submission.csv would fail at the end)."""
        if column not in sample.columns:  # a column per class: submission.csv's own check reads their form
            return
        values = sample[column]
        numeric = values.dtype.kind in "iufb"
        writes = ("three labels separated by spaces" if self.name == "map@3" else
                  "a probability" if self.name in ("auc", "logloss") and self.task == "binary" else
                  "a value" if self.task == "regression" else "")
        if writes and numeric == (self.name == "map@3"):
            raise MetricError(f"metric={self.name!r} writes {writes} per row, but sample_submission.csv's {column!r} "
                              f"holds {'numbers' if numeric else 'text'} ({str(values.iloc[0])!r}): set metric to the "
                              "competition's (its Evaluation page): accuracy for labels, auc or logloss for "
                              "probabilities, rmse, mae... for values")

    def cv(self, y, pred, fold_of) -> float:
        """The mean of the per-fold scores (``fold_of``: each row's fold), the CV a table reports:
        a blend fitted per fold is judged on each fold as the models are, not pooled (pooling
        rows of blends whose weights differ by fold would penalise a ranking metric for it)."""
        y, pred, fold_of = np.asarray(y), np.asarray(pred), np.asarray(fold_of)
        folds = np.unique(fold_of[fold_of >= 0])
        return float(np.mean([self.score(y[fold_of == k], pred[fold_of == k]) for k in folds]))

    def batch(self, y: torch.Tensor, preds: torch.Tensor) -> torch.Tensor:
        """Scores of ``preds`` (B, N) or (B, N, C) against ``y`` (N,): one per candidate."""
        if self.task == "multilabel":
            raise MetricError(f"{self.name} of several labels per row has no batched form: score each with score()")
        if self.task == "regression":
            err = preds - y
            if self.name == "mae":
                return err.abs().mean(1)
            if self.name == "r2":
                return 1 - err.pow(2).sum(1) / (y - y.mean()).pow(2).sum()
            return err.pow(2).mean(1).sqrt()
        if self.name == "auc" and self.task == "binary":
            return _batch_auc(y, preds)
        if self.name == "logloss" and self.task == "binary":  # the two-column form, without building it
            p = preds.clamp(EPS, 1 - EPS)
            return -(y * p.log() + (1 - y) * (1 - p).log()).mean(1)
        proba = torch.stack([1 - preds, preds], -1) if self.task == "binary" else preds
        if self.name == "logloss":
            clipped = proba.clamp(EPS, 1 - EPS)
            clipped = clipped / clipped.sum(-1, keepdim=True)
            return -clipped.gather(-1, y.long().expand(len(preds), -1).unsqueeze(-1)).log().mean((1, 2))
        truth = proba.gather(-1, y.long().expand(len(preds), -1).unsqueeze(-1))
        above = (proba > truth).sum(-1).float()  # classes ranked above the true one
        if self.name == "accuracy":
            return (above == 0).float().mean(1)
        if self.name == "map@3":
            return torch.where(above < 3, 1 / (above + 1), torch.zeros_like(above)).mean(1)
        raise MetricError(f"{self.name} has no batched form for a {self.task} task")

    def submission(self, pred: np.ndarray, classes: list | None):
        """What the submission file holds for ``pred``: values (regression, back in the target's
        units), the probability of the positive class (AUC, binary log loss), a probability per
        class (multiclass log loss: a 2-D array), a label in the competition's words (accuracy),
        or three labels by descending probability, space-separated (MAP@3)."""
        pred = np.asarray(pred, dtype=np.float64)
        if self.task == "regression":
            return self.from_space(pred)
        if self.name in ("auc", "logloss"):
            return pred
        proba = _two_columns(pred) if self.task == "binary" else pred
        labels = np.asarray(classes, dtype=object)
        if self.name == "accuracy":
            return labels[proba.argmax(1)]
        top = np.argsort(-proba, axis=1, kind="stable")[:, :3]
        return np.array([" ".join(map(str, row)) for row in labels[top]], dtype=object)


def _known(name: str) -> str:
    """``name`` as the kit spells it (case and spaces ignored: "MAP@3", "roc_auc", "RMSE")."""
    key = name.strip().lower().replace(" ", "").replace("roc_auc", "auc").replace("log_loss", "logloss")
    key = {"map3": "map@3", "mapk": "map@3", "map@k": "map@3"}.get(key, key)
    if key not in REGRESSION + CLASSIFICATION:
        raise MetricError(f"metric={name!r} is not one the kit scores: use one of "
                          f"{', '.join(REGRESSION + CLASSIFICATION)}")
    return key


def classifies(name: str) -> bool:
    """Does the metric ``name`` score classes (its target's values are labels)?"""
    return _known(name) in CLASSIFICATION


def get(name: str, classes: int = 0, multilabel: bool = False) -> Metric:
    """The metric ``name`` for a target of ``classes`` classes (0: a regression's); ``multilabel``:
    of ``classes`` labels, several per row (``auc``: the mean of each label's; ``f1``: each row's
    F1 of the labels above a threshold, averaged: ``score.multilabel``)."""
    if multilabel:
        key = name.strip().lower().replace("roc_auc", "auc")
        if key not in MULTILABEL:
            raise MetricError(f"metric={name!r} does not score several labels per row: use "
                              f"{' or '.join(MULTILABEL)} (the mean of each label's ROC AUC, or samples F1)")
        return Metric(key, "multilabel", True)
    key = _known(name)
    if key in REGRESSION:
        return Metric(key, "regression", key == "r2")
    if classes < 2:
        raise MetricError(f"metric={name!r} scores classes, but the target has {classes} distinct "
                          "values: pick a regression metric (rmse, rmsle, mae, r2) or check target_column")
    if key == "map@3" and classes < 4:
        raise MetricError(f"metric='map@3' needs more than three classes to rank (the target has "
                          f"{classes}): use accuracy or logloss")
    return Metric(key, "binary" if classes == 2 else "multiclass", key != "logloss")


def _two_columns(pred: np.ndarray) -> np.ndarray:
    return np.stack([1 - pred, pred], 1) if pred.ndim == 1 else pred


def _map_at_3(y: np.ndarray, proba: np.ndarray) -> float:
    top = np.argsort(-proba, axis=1, kind="stable")[:, :3]
    hit = top == np.asarray(y)[:, None]
    return float((hit * (1 / np.arange(1, 4))).sum(1).mean())


def _batch_auc(y: torch.Tensor, preds: torch.Tensor) -> torch.Tensor:
    """ROC AUC of each row of ``preds``: for every positive, the negatives scored below it (a tie
    counts a half, as in scikit-learn), found by binary search in the sorted negatives."""
    positive = y.bool()
    negatives = preds[:, ~positive].contiguous().sort(1).values
    positives = preds[:, positive].contiguous()
    below = torch.searchsorted(negatives, positives, right=False).sum(1, dtype=torch.float64)
    at_most = torch.searchsorted(negatives, positives, right=True).sum(1, dtype=torch.float64)
    pairs = float(positives.shape[1]) * negatives.shape[1]
    return ((below + at_most) / (2 * pairs)).to(preds.dtype)
