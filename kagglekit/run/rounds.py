"""Pseudo-label rounds that survive kernels: round r's students teach round r + 1, fold by fold.

Each round is a cross-validation of its own (``<name>-round<r>``: every fold a unit, on the same
split), keyed by the keys of the round before, so a kill or a new kernel version resumes at the
round and fold it reached and a finished round or fold is a cache hit, never trained again. Fold k
of round r + 1 is taught by fold k of round r alone (``distill.pseudo_labels``): that model never
saw fold k's validation rows, so the CV of every round is honest on the labelled rows. The rounds
stop when CV stops improving (said), or at ``max_rounds``. ``pseudo_label_rounds`` does it for one
model's cross-validation; ``zoo_rounds`` for a ``kk.zoo`` ensemble's models (the tabular GBDTs), each
(model, fold) of each round a unit of the zoo's.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..machine.display import notice
from .distill import Teacher, check_folds
from .foldresults import CVResult
from .folds import CrossValidation


@dataclass
class Round:
    """One round: its cross-validation (its folds' units: the models to restore) and its result."""
    cv: CrossValidation
    result: CVResult


def pseudo_label_rounds(run, name: str, splitter, *, n: int, y, train_fold: Callable, metric: Callable,
                        max_rounds: int = 3, higher_is_better: bool = True, data=None, code=None,
                        per_version: int = 0, first: Teacher | None = None, groups=None, target=None,
                        model: str | None = None, config: dict | None = None) -> list[Round]:
    """Rounds 1.. of ``train_fold(fold, teacher) -> kk.folds.Predictions``: its ``oof`` (and ``test``, if
    any) hold one model's probabilities, its ``record["pool"]`` that fold model's probabilities of the
    unlabelled pool; ``teacher`` is ``first`` in round 1 (None: the first round learns the labels alone) and
    then a ``distill.Teacher`` of the round before (``distill.pseudo_labels(teacher, fold.index)``).
    ``metric(truth, prediction)`` scores the labelled rows (``target``: their truth where it is not ``y``, the
    labels the folds are stratified on); ``model``: the one of the predictions that teaches and is compared (the
    first by default); ``groups`` and ``config`` go to every round's cross-validation. The rounds done, the
    last one unfinished (pending folds) if the session ended in it; ``best_round`` picks the one to use."""
    from ..state import keys
    rounds: list[Round] = []
    teacher, best = first, None
    after = keys.fingerprint(first.fold_pool)[:16] if first is not None else ""  # new labels: a new round 1
    for r in range(1, max_rounds + 1):
        cv = CrossValidation(run, f"{name}-round{r}", splitter, n=n, y=y, groups=groups, code=code or train_fold,
                             data=data, config={**(config or {}), "round": r, "after": after})
        if teacher is not None and teacher.fold_of is not None:
            check_folds(teacher, cv.fold_of, f"{name} round {r}")  # other folds: refused, naming both
        taught = functools.partial(_taught, train_fold, teacher)  # this round's teacher, bound now
        result = cv.run(taught, target=y if target is None else target, metric=metric,
                        higher_is_better=higher_is_better, per_version=per_version)
        rounds.append(Round(cv, result))
        if not result.complete:
            return rounds
        model = model or next(iter(result.scores))
        score = result.scores[model]["mean"]
        if best is not None and not (score > best if higher_is_better else score < best):
            notice(f"{name}: round {r}'s CV {score:.4f} does not beat round {r - 1}'s {best:.4f}: the rounds stop, "
                   f"round {r - 1}'s students are the ones to use")
            break
        best, after = score, ",".join(f.unit.key for f in cv.folds)
        tested = [result.fold_test.get(k, {}) for k in range(len(cv.folds))]  # none where the folds predict no test
        teacher = Teacher(f"{name} round {r}", cv.fold_of, result.oof[model],
                          [np.asarray(result.records[k]["pool"]) for k in range(len(cv.folds))],
                          [t[model] for t in tested if model in t])
    return rounds


def best_round(rounds: list[Round], higher_is_better: bool = True, model: str | None = None) -> Round | None:
    """The finished round of ``model``'s (the first's) best CV, the earlier on a tie; None while round 1 is
    unfinished."""
    done = [r for r in rounds if r.result.complete]
    if not done:
        return None
    mean = lambda r: r.result.scores[model or next(iter(r.result.scores))]["mean"]  # noqa: E731
    return (max if higher_is_better else min)(done, key=mean)


def _taught(train_fold: Callable, teacher: Teacher | None, fold):
    return train_fold(fold, teacher)


def zoo_rounds(cv, zoo: dict, fold_data: Callable, scoring: dict, *, first: CVResult, taught: Sequence[str],
               teacher_of: Callable, data_with: Callable, rounds: int = 1, extra: dict | None = None) -> CVResult:
    """Pseudo-label rounds of a ``kk.zoo`` ensemble (the tabular notebook's GBDTs). Round r trains the
    models ``taught`` again, as ``<name>+pl`` in round 1 and ``<name>+pl<r>`` after, each fold's data
    ``data_with(teacher, fold)`` where ``teacher = teacher_of(result, names)`` is the round before's
    (``first``'s ``taught`` for round 1): a ``distill.Teacher`` whose fold k labels fold k's rows only.
    Each (model, fold) a unit keyed by its teacher's labels: a kill or a new version resumes at the
    round and fold it reached, a finished one is never trained again. ``extra``: models trained
    beside round 1 (a student). The rounds stop when a round's best CV does not beat the round
    before's (said); the result holds every round's models, for the ensemble to weigh."""
    from ..state import keys
    from .zoo import Model, cross_validate
    higher = scoring.get("higher_is_better", False)
    result, names = first, list(taught)
    best = _best(first, names, higher) if taught else 0.0
    zoo.update(extra or {})
    for r in range(1, (rounds if taught else 1) + 1):
        if taught:
            teacher = teacher_of(result, names)
            taught_by = {"teacher": keys.fingerprint(teacher.fold_pool)[:16]}  # new labels: a new model
            names = [f"{n}+pl{r if r > 1 else ''}" for n in taught]
            zoo.update({name: Model(zoo[n].train, {**zoo[n].config, **taught_by},
                                    data=functools.partial(data_with, teacher)) for n, name in zip(taught, names)})
        result = cross_validate(cv, zoo, fold_data, **scoring)
        if not (taught and result.complete):
            break
        score = _best(result, names, higher)
        if not (score > best if higher else score < best):
            notice(f"pseudo-label round {r}: its best CV {score:.5g} does not beat the round before's {best:.5g}: "
                   "the rounds stop")
            break
        best = score
    return result


def _best(result: CVResult, names: list[str], higher: bool) -> float:
    means = [result.scores[n]["mean"] for n in names]
    return max(means) if higher else min(means)
