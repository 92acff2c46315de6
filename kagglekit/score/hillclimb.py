"""Hill climbing over out-of-fold predictions, as tabular grandmasters ensemble hundreds of them.

Start from the best single model; at each step try every model (chosen ones again too) at every
weight of a grid that includes negative weights (coarse to fine), ``blend = (1 - w) * blend + w * model``, and
keep the one that improves the CV score most; stop when no step improves it by ``tolerance``.
Weights therefore sum to one and may be negative (a model that corrects another's bias). All
candidates of a step are scored at once in torch (``Metric.batch``), on the GPU where the notebook
sees one: 300 OOFs of 100,000 rows is benchmarks/hillclimb.py.

A climb scored on the rows it was fitted on flatters itself. ``cross_validated`` climbs once per
fold on the other folds' rows and predicts the held-out fold: the honest CV the submission's
choice between a single model, the climb and a stack is made on.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

GRID = np.round(np.arange(-0.5, 0.5001, 0.01), 2)  # the candidate weights of each step (0 left out)
CHUNK_ELEMENTS = 2 ** 25  # blend values scored at once (memory: 4 bytes each)
COARSE = 5  # a step first tries every fifth weight of the grid, then the grid's around the best


@dataclass
class Climb:
    weights: dict  # model -> weight (sum to one; may be negative)
    score: float  # on the rows it climbed on
    steps: list = field(default_factory=list)  # [{"model", "weight", "score"}]: the first is the start

    def apply(self, predictions: dict) -> np.ndarray:
        """The blend of ``predictions`` (model -> array, e.g. the test rows') with these weights."""
        return sum(w * np.asarray(predictions[m], dtype=np.float64) for m, w in self.weights.items())


def climb(oof: dict, y, metric, *, grid=GRID, tolerance: float = 1e-5, max_steps: int = 100,
          device: str | None = None) -> Climb:
    """The climb over ``oof`` (model -> predictions of the same rows) for ``y``, scored by
    ``metric`` (``run.scoring.Metric``)."""
    names = list(oof)
    if not names:
        raise ValueError("hill climbing needs at least one model's OOF predictions")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    preds = torch.stack([torch.as_tensor(np.asarray(oof[m]), dtype=torch.float32) for m in names]).to(device)
    target = torch.as_tensor(np.asarray(y)).to(device)
    target = target.float() if metric.task == "regression" else target.long()
    singles = metric.batch(target, preds).cpu().numpy()
    start = int(np.argmax(singles) if metric.higher_is_better else np.argmin(singles))
    weights = {names[start]: 1.0}
    steps = [{"model": names[start], "weight": 1.0, "score": float(singles[start])}]
    blend, best = preds[start], float(singles[start])
    grid = torch.as_tensor(np.sort([w for w in grid if w != 0]), dtype=torch.float32, device=device)
    for _ in range(max_steps):
        model, weight, score = _best_step(preds, blend, target, metric, grid)
        gain = score - best if metric.higher_is_better else best - score
        if gain < tolerance:
            break
        blend = (1 - weight) * blend + weight * preds[model]
        weights = {m: w * (1 - weight) for m, w in weights.items()}
        weights[names[model]] = weights.get(names[model], 0.0) + weight
        best = score
        steps.append({"model": names[model], "weight": weight, "score": score})
    return Climb({m: float(w) for m, w in weights.items()}, best, steps)


def _best_step(preds, blend, target, metric, grid) -> tuple[int, float, float]:
    """(model index, weight, score) of the best single step from ``blend``: each model's weight
    found coarse to fine (every ``COARSE``-th weight of the grid, then the grid's weights around
    the best of those): a fifth of the scoring for metrics convex in the weight (RMSE, log loss,
    MAE: the same answer as the whole grid), a close one for ranking metrics (AUC)."""
    best = (0, 0.0, -np.inf if metric.higher_is_better else np.inf)
    coarse = grid[::COARSE]
    spacing = float(coarse[1] - coarse[0]) if len(coarse) > 1 else 0.0
    for model in range(len(preds)):
        step = preds[model] - blend
        scores = _scores(metric, target, blend, step, coarse)
        at = float(coarse[int(scores.argmax() if metric.higher_is_better else scores.argmin())])
        near = grid[((grid - at).abs() < spacing - 1e-6) & ((grid[:, None] != coarse[None]).all(1))]
        weights = torch.cat([coarse, near])
        scores = torch.cat([scores, _scores(metric, target, blend, step, near)])
        i = int(scores.argmax() if metric.higher_is_better else scores.argmin())
        if metric.better(float(scores[i]), best[2]):
            best = (model, round(float(weights[i]), 6), float(scores[i]))
    return best


def _scores(metric, target, blend, step, weights) -> torch.Tensor:
    """``metric`` of ``blend + w * step`` for every ``w``, in chunks that bound the memory."""
    per_row = int(np.prod(blend.shape[1:])) if blend.dim() > 1 else 1
    chunk = max(1, CHUNK_ELEMENTS // (blend.shape[0] * per_row))
    parts = [metric.batch(target, blend + weights[s:s + chunk].view(-1, *([1] * blend.dim())) * step)
             for s in range(0, len(weights), chunk)]
    return torch.cat(parts) if parts else torch.empty(0)


def cross_validated(oof: dict, y, fold_of, metric, **options) -> tuple[np.ndarray, list[Climb]]:
    """Honest OOF predictions of the climb: for each fold, the climb fitted on the other
    folds' rows predicts this fold's; with the per-fold climbs. A single held-out fold (a
    holdout split) has no other fold: its rows are split in two halves (alternate rows of a
    seeded shuffle), each predicted by the climb fitted on the other."""
    fold_of = _at_least_two(np.asarray(fold_of))
    first = np.asarray(next(iter(oof.values())))
    out, climbs = np.full(first.shape, np.nan), []
    for k in np.unique(fold_of[fold_of >= 0]):
        fit, held = (fold_of != k) & (fold_of >= 0), fold_of == k
        fitted = climb({m: np.asarray(v)[fit] for m, v in oof.items()}, np.asarray(y)[fit], metric, **options)
        out[held] = fitted.apply({m: np.asarray(v)[held] for m, v in oof.items()})
        climbs.append(fitted)
    return out, climbs


def _at_least_two(fold_of: np.ndarray) -> np.ndarray:
    folds = np.unique(fold_of[fold_of >= 0])
    if len(folds) != 1:
        return fold_of
    rows = np.flatnonzero(fold_of == folds[0])
    halves = fold_of.copy()
    halves[np.random.default_rng(0).permutation(rows)[::2]] = folds[0] + 1
    return halves
