"""Pseudo-label rounds that survive kernels: round r's students teach round r + 1, fold by fold.

Each round is a cross-validation of its own (``<name>-round<r>``: every fold a unit, on the same
split), keyed by the keys of the round before, so a kill or a new kernel version resumes at the
round and fold it reached and a finished round or fold is a cache hit, never trained again. Fold k
of round r + 1 is taught by fold k of round r alone (``distill.pseudo_labels``): that model never
saw fold k's validation rows, so the CV of every round is honest on the labelled rows. The rounds
stop when CV stops improving (said), or at ``max_rounds``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ..machine.display import notice
from .distill import Teacher
from .foldresults import CVResult
from .folds import CrossValidation


def pseudo_label_rounds(run, name: str, splitter, *, n: int, y, train_fold: Callable, metric: Callable,
                        max_rounds: int = 3, higher_is_better: bool = True, data=None, code=None,
                        per_version: int = 0) -> list[CVResult]:
    """Rounds 1.. of ``train_fold(fold, teacher) -> kk.folds.Predictions``: its ``oof`` and ``test`` hold
    one model's probabilities, its ``record["pool"]`` that fold model's probabilities of the unlabelled
    pool (a tensor); ``teacher`` is None in round 1 and then a ``distill.Teacher`` of the round before
    (``distill.pseudo_labels(teacher, fold.index)``). ``metric(truth, prediction)`` scores the labelled
    rows. The rounds done, the last one unfinished (pending folds) if the session ended in it."""
    results: list[CVResult] = []
    teacher, after, best = None, "", None
    for r in range(1, max_rounds + 1):
        cv = CrossValidation(run, f"{name}-round{r}", splitter, n=n, y=y, code=code or train_fold, data=data,
                             config={"round": r, "after": after})
        taught = functools.partial(_taught, train_fold, teacher)  # this round's teacher, bound now
        result = cv.run(taught, target=y, metric=metric, higher_is_better=higher_is_better, per_version=per_version)
        results.append(result)
        if not result.complete:
            return results
        model = next(iter(result.scores))
        score = result.scores[model]["mean"]
        if best is not None and not (score > best if higher_is_better else score < best):
            notice(f"{name}: round {r}'s CV {score:.4f} does not beat round {r - 1}'s {best:.4f}: the rounds stop, "
                   f"round {r - 1}'s students are the ones to use")
            break
        best, after = score, ",".join(f.unit.key for f in cv.folds)
        teacher = Teacher(f"{name} round {r}", cv.fold_of, result.oof[model],
                          [np.asarray(result.records[k]["pool"]) for k in range(len(cv.folds))],
                          [result.fold_test[k][model] for k in range(len(cv.folds))])
    return results


def _taught(train_fold: Callable, teacher: Teacher | None, fold):
    return train_fold(fold, teacher)
