"""Teachers and students that know which folds they saw: soft labels and pseudo-labels without
the leak that inflates a student's CV (issue 87).

A teacher is cross-validated on the same folds as its student (``Teacher``: its out-of-fold
predictions, each row's fold, each fold model's predictions of the unlabelled pool and the test).
For the student's fold k:

- **training rows** take fold k's teacher's prediction (``policy="fold"``, the default: the one
  model that never saw fold k's validation rows; the training rows are in-sample to it), or the
  teacher's out-of-fold prediction (``policy="oof"``: the fold model that did not see the row). The
  second is what competitors do, and it leaks fold k's labels at second hand: the model that labels
  a training row trained on fold k's rows, and the student learns it. On the digits
  (``benchmarks/distill_digits.py``) it lifted a student's CV from 0.94 to 0.9767 while its test
  accuracy fell from 0.9489 to 0.9356; the planted leak (a teacher on every row) reached CV 1.0.
- **unlabelled rows** are pseudo-labelled by fold k's teacher only (``pseudo_labels``): a pool
  labelled by every fold model, as the test is, would carry fold k's labels into fold k's training;
- **the test** takes the mean of the fold teachers, as a submission does.

A teacher whose folds are not the student's, or unknown (trained on every labelled row), is refused
before any training, naming both (``check_folds``): its soft labels would carry the student's
validation rows. ``loss`` is the distillation loss a notebook hands ``fit``, ``Taught`` the rows it
reads, ``prediction_ms`` what a student saves a CPU rerun.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import Dataset


class DistillError(ValueError):
    """A teacher whose folds are not the student's, or rows that do not line up."""


@dataclass
class Teacher:
    """What a cross-validated teacher hands its students. ``fold_of``: each labelled row's
    validating fold (None: unknown, or a teacher trained on every row); ``oof``: (rows, classes)
    probabilities, each from the fold model that did not see the row; ``fold_pool`` / ``fold_test``:
    per fold model, its probabilities of the unlabelled pool / the test rows."""
    name: str
    fold_of: np.ndarray | None
    oof: np.ndarray
    fold_pool: list = field(default_factory=list)
    fold_test: list = field(default_factory=list)
    ids: np.ndarray | None = None  # the labelled rows' ids, to line them up with the student's

    @property
    def test(self) -> np.ndarray:
        """The mean of the fold teachers over the test rows (what a submission sends)."""
        return np.mean(self.fold_test, axis=0)


def check_folds(teacher: Teacher, student_fold_of: np.ndarray, student: str = "student", ids=None) -> None:
    """Refuse, naming both, a teacher whose folds are unknown or are not ``student_fold_of``, or whose
    rows are not the student's (``ids``)."""
    if ids is not None and teacher.ids is not None and not np.array_equal(np.asarray(ids), teacher.ids):
        raise DistillError(f"teacher {teacher.name!r} and {student!r} do not hold the same rows in the same order: "
                           "align the teacher's out-of-fold predictions by id first")
    if teacher.fold_of is None:
        raise DistillError(f"teacher {teacher.name!r} has no fold assignment (trained on every labelled row?): its "
                           f"soft labels would carry the validation rows of {student!r}. Cross-validate it on the "
                           "same folds")
    mine = np.asarray(student_fold_of)
    if teacher.fold_of.shape != mine.shape or not np.array_equal(teacher.fold_of, mine):
        differ = int((teacher.fold_of != mine).sum()) if teacher.fold_of.shape == mine.shape else len(mine)
        raise DistillError(f"teacher {teacher.name!r}'s folds are not {student!r}'s ({differ} of {len(mine)} rows in "
                           "another fold): a training row's soft label would come from a model that saw the "
                           "student's validation rows. Use the same splitter and seed for both (kk.folds)")


def soft_targets(teacher: Teacher, fold: int, rows: np.ndarray, policy: str = "fold",
                 fold_train: np.ndarray | None = None) -> np.ndarray:
    """The soft labels of the student's fold ``fold`` for its training ``rows``: fold ``fold``'s teacher's
    (``"fold"``: ``fold_train`` holds that model's predictions of the labelled rows), or the teacher's OOF
    predictions (``"oof"``: its CV reads fold ``fold``'s labels at second hand, see the module)."""
    if policy == "oof":
        return teacher.oof[rows]
    if policy == "fold":
        if fold_train is None:
            raise DistillError("policy='fold' needs fold k's teacher's predictions of the labelled rows (fold_train)")
        return fold_train[rows]
    raise DistillError(f"policy={policy!r}: 'oof' or 'fold'")


def pseudo_labels(teacher: Teacher, fold: int, threshold: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(pool rows, their soft labels) for the student's fold ``fold``: fold ``fold``'s teacher only (it never
    saw that fold's validation rows); rows under ``threshold`` of confidence left out."""
    probs = np.asarray(teacher.fold_pool[fold])
    keep = np.flatnonzero(probs.max(1) >= threshold)
    return keep, probs[keep]


def loss(temperature: float = 2.0, mix: float = 0.5):
    """The distillation loss for ``fit``: ``loss(model, (x, hard, soft))`` = ``mix`` x T^2 x KL(teacher's
    soft labels at temperature T || the student's) + (1 - ``mix``) x cross-entropy on the hard labels
    (rows whose hard label is -1, the pseudo-labelled, take the soft term alone)."""
    if temperature <= 0 or not 0.0 <= mix <= 1.0:
        raise DistillError(f"temperature={temperature} must be > 0 and mix={mix} within [0, 1]")

    def distill_loss(model, batch):
        x, hard, soft = batch
        logits = model(x).float()
        sharpened = F.softmax(torch.log(soft.float().clamp_min(1e-8)) / temperature, dim=1)
        kl = F.kl_div(F.log_softmax(logits / temperature, dim=1), sharpened, reduction="none").sum(1)
        labelled = hard >= 0
        ce = F.cross_entropy(logits[labelled], hard[labelled], reduction="sum") if labelled.any() else logits.sum() * 0
        weight = torch.where(labelled, torch.full_like(kl, mix), torch.ones_like(kl))
        return ((weight * kl).sum() * temperature ** 2 + (1 - mix) * ce) / len(x)
    return distill_loss


class Taught(Dataset):
    """A student's fold as (x, hard, soft) rows for ``loss``: its labelled training rows first
    (``inputs[rows]``, their labels, the labels as probabilities), then the pool's (``pool[pool_rows]``,
    no hard label: -1, the teacher's probabilities ``soft``). Rows are read by index, never copied."""

    def __init__(self, inputs, labels, rows, pool, pool_rows, soft, classes: int):
        self.inputs, self.labels, self.rows, self.pool, self.pool_rows = inputs, labels, rows, pool, pool_rows
        self.soft, self.classes = torch.as_tensor(np.asarray(soft), dtype=torch.float32), classes
        if len(self.soft) != len(pool_rows):
            raise DistillError(f"{len(pool_rows)} pool rows and {len(self.soft)} soft labels: one per row")

    def __len__(self) -> int:
        return len(self.rows) + len(self.pool_rows)

    def __getitem__(self, i: int):
        if i < len(self.rows):
            label = torch.as_tensor(self.labels[self.rows[i]]).long()
            return self.inputs[self.rows[i]], label, F.one_hot(label, self.classes).float()
        j = i - len(self.rows)
        return self.pool[self.pool_rows[j]], torch.tensor(-1), self.soft[j]


def prediction_ms(models: dict, inputs, repeats: int = 3, threads: int | None = None) -> dict:
    """Milliseconds per row of each ``model(inputs)`` on the CPU in fp32 without gradients, the best
    of ``repeats``, on ``threads`` cores (None: torch's count here; a rerun's, BirdCLEF's 4, to compare
    with an export's rate): what a CPU rerun pays per test row, a student's beside its teacher's."""
    timed, previous = {}, torch.get_num_threads()
    torch.set_num_threads(threads or previous)
    try:
        with torch.no_grad():
            for name, model in models.items():
                model, best = model.cpu().float().eval(), float("inf")
                for _ in range(repeats):
                    started = time.perf_counter()
                    model(inputs)
                    best = min(best, time.perf_counter() - started)
                timed[name] = round(1e3 * best / len(inputs), 4)
    finally:
        torch.set_num_threads(previous)
    return timed
