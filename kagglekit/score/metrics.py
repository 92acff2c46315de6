"""Scores computed by scikit-learn, on every rank's outputs gathered first.

Ranking metrics (PR-AUC, ROC-AUC) are easy to get subtly wrong by hand: with tied
scores a hand-written average precision depends on the sort order and comes out
high, and logits produced under fp16 autocast (the T4 path) carry about three
significant digits, so ties are common exactly where a Kaggle run is judged. Every
score here is scikit-learn's own definition; this module only moves tensors to it:
- scores are compared in float32 or wider (half-precision input is widened, and
  warned about once: ties were already made where the logits were computed);
- under DDP the rows of every rank are gathered before scoring (``gather``),
  never scored per rank and averaged.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.distributed as dist

from ..parallel import ranks

_warned_half = False


def _numpy(t, dtype=np.float64) -> np.ndarray:
    global _warned_half
    if isinstance(t, torch.Tensor):
        if t.dtype in (torch.float16, torch.bfloat16) and not _warned_half:
            _warned_half = True
            warnings.warn(f"scores arrived as {t.dtype}: rankings computed from them are full of "
                          "ties. Compute the evaluation forward outside autocast (or at least "
                          "its last layer) so scores stay float32.", stacklevel=3)
        t = t.detach().float().cpu().numpy()
    return np.asarray(t, dtype=dtype)


def _labels(t) -> np.ndarray:
    return _numpy(t, np.int64)


def gather(*tensors: torch.Tensor, index: torch.Tensor | None = None) -> tuple:
    """Rows of every rank, concatenated in rank order (on every rank), for scoring.

    Ranks may hold different numbers of rows. ``index``: the dataset index of each
    row; rows seen twice (a DistributedSampler pads the last shard with repeats)
    are then kept once. Outside DDP the tensors come back unchanged.
    """
    if index is not None:
        tensors = (*tensors, index)
    if ranks.distributed():
        tensors = tuple(_all_gather_rows(t) for t in tensors)
    if index is None:
        return tensors
    *values, seen = tensors
    first = _first_occurrence(seen)
    return tuple(v[first] for v in values)


def _all_gather_rows(t: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    size = torch.tensor([t.shape[0]], device=t.device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    padded = t.new_zeros((longest, *t.shape[1:]))
    padded[: t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(s.item())] for p, s in zip(parts, sizes)])


def _first_occurrence(index: torch.Tensor) -> torch.Tensor:
    """Positions of the first occurrence of each distinct value, in original order."""
    order = torch.argsort(index, stable=True)
    ordered = index[order]
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return torch.sort(order[first]).values


# ---- binary scores ------------------------------------------------------------------------
def average_precision(scores, labels) -> float:
    """PR-AUC as average precision (scikit-learn's definition; ties handled); NaN
    when there is no positive."""
    from sklearn.metrics import average_precision_score
    y = _labels(labels)
    if not y.any():
        return float("nan")
    return float(average_precision_score(y, _numpy(scores)))


def pr_curve(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    """(precision, recall) at every distinct threshold (scikit-learn's curve)."""
    from sklearn.metrics import precision_recall_curve
    precision, recall, _ = precision_recall_curve(_labels(labels), _numpy(scores))
    return precision, recall


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve; NaN when only one class is present."""
    from sklearn.metrics import roc_auc_score
    y = _labels(labels)
    if len(np.unique(y)) < 2:
        return float("nan")
    return float(roc_auc_score(y, _numpy(scores)))


def macro_roc_auc(scores, labels) -> float:
    """BirdCLEF's metric (2024-2025): ROC AUC of each class (column) that has a positive in
    ``labels`` (N, C), averaged; classes without one are skipped, not scored 0.5. Soft labels
    (a secondary species' 0.5) count as positive. NaN when no class has both kinds."""
    from sklearn.metrics import roc_auc_score
    y, s = _numpy(labels) > 0, _numpy(scores)
    if y.ndim != 2 or s.shape != y.shape:
        raise ValueError(f"macro_roc_auc takes (rows, classes) scores and labels: got {s.shape} and {y.shape}")
    scored = [k for k in range(y.shape[1]) if 0 < y[:, k].sum() < len(y)]
    if not scored:
        return float("nan")
    return float(np.mean([roc_auc_score(y[:, k], s[:, k]) for k in scored]))


def f1_at(scores, labels, threshold: float) -> float:
    """F1 of the positive class when ``scores >= threshold`` is called positive."""
    from sklearn.metrics import f1_score
    return float(f1_score(_labels(labels), _numpy(scores) >= threshold, zero_division=0))


def best_f1_threshold(scores, labels) -> float:
    """The score threshold with the best positive-class F1 (chosen on validation, applied to
    test: never chosen on the rows it is judged on)."""
    from sklearn.metrics import precision_recall_curve
    precision, recall, thresholds = precision_recall_curve(_labels(labels), _numpy(scores))
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
    return float(thresholds[int(np.argmax(f1[:-1]))]) if len(thresholds) else 0.0


def binary(logits, labels, threshold: float = 0.0) -> dict:
    """PR-AUC and ROC-AUC from one logit per row; F1, precision and recall of the positive class
    calling ``logit >= threshold`` positive (0: probability 0.5)."""
    from sklearn.metrics import precision_score, recall_score
    scores = _numpy(logits).reshape(-1)
    called = scores >= threshold
    y = _labels(labels)
    return {"pr_auc": average_precision(scores, labels), "roc_auc": roc_auc(scores, labels),
            "f1": f1_at(scores, labels, threshold),
            "precision": float(precision_score(y, called, zero_division=0)),
            "recall": float(recall_score(y, called, zero_division=0))}


# ---- several classes ----------------------------------------------------------------------
def multiclass(logits, labels) -> dict:
    """Accuracy, macro F1 and macro PR-AUC (one class against the rest) from logits."""
    from sklearn.metrics import accuracy_score, average_precision_score, f1_score
    scores, y = _numpy(logits), _labels(labels)
    pred = scores.argmax(1)
    present = np.unique(y)  # a class absent from y has no PR curve
    onehot = (y[:, None] == present[None, :])
    return {"accuracy": float(accuracy_score(y, pred)),
            "f1_macro": float(f1_score(y, pred, average="macro", zero_division=0)),
            "pr_auc": float(average_precision_score(onehot, scores[:, present], average="macro"))}


def classification(logits, labels, threshold: float = 0.0) -> dict:
    """``binary`` for one logit per row (called positive from ``threshold``), ``multiclass``
    for several."""
    logits = torch.as_tensor(logits)
    if logits.dim() == 1 or logits.shape[1] == 1:
        return binary(logits, labels, threshold)
    return multiclass(logits, labels)


def scored(logits, labels, val_rows, test_rows) -> dict:
    """``classification`` on the validation rows and on the test rows; one logit per row is
    called positive from the threshold with the best F1 on validation, never one chosen on test."""
    logits, labels = torch.as_tensor(logits), torch.as_tensor(labels)
    binary_label = logits.dim() == 1 or logits.shape[1] == 1
    val, test = logits[val_rows], logits[test_rows]
    threshold = best_f1_threshold(val.reshape(-1), labels[val_rows]) if binary_label else 0.0
    return {"threshold": threshold, "val": classification(val, labels[val_rows], threshold),
            "test": classification(test, labels[test_rows], threshold)}


def score_table(results: dict) -> list[dict]:
    """``{model: scored(...)}`` as a row per model, its validation and test scores side by side
    (``val_<score>``, ``test_<score>``): what metrics.json keeps and a notebook's table shows."""
    return [{"model": name, **{f"{part}_{k}": v for part in ("val", "test") for k, v in r[part].items()}}
            for name, r in results.items()]


def average_logits(parts: list) -> torch.Tensor:
    """The mean prediction of several trainings (seeds, folds), as logits again: their
    probabilities averaged (a sigmoid for one logit per row, a softmax for several)."""
    logits = torch.stack([torch.as_tensor(p) for p in parts])
    if logits.dim() == 2 or logits.shape[-1] == 1:
        return torch.logit(torch.sigmoid(logits).mean(0), eps=1e-7)
    return torch.log(torch.softmax(logits, -1).mean(0))


# ---- regression ---------------------------------------------------------------------------
def regression(pred, truth) -> dict:
    """MAE and RMSE over every element (all horizons and series alike)."""
    from sklearn.metrics import mean_absolute_error, root_mean_squared_error
    p, t = _numpy(pred).reshape(-1), _numpy(truth).reshape(-1)
    return {"mae": float(mean_absolute_error(t, p)), "rmse": float(root_mean_squared_error(t, p))}
