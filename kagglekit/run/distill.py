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

A teacher from another run (``from_output``: a bigger model's run whose folds returned ``labelled``,
each fold model's predictions of every labelled row) is read by id, the same policy holding across
runs. A teacher whose folds are not the student's, or unknown (trained on every labelled row), is refused
before any training, naming both (``check_folds``): its soft labels would carry the student's
validation rows. ``loss`` is the distillation loss a notebook hands ``fit``, ``Taught`` the rows it
reads, ``prediction_ms`` what a student saves a CPU rerun.
"""
from __future__ import annotations

import json
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
    fold_labelled: list = field(default_factory=list)  # per fold model: its predictions of every labelled row
    prediction_s: float | None = None  # its run's seconds to predict the test rows (a student's is set beside it)
    files: list = field(default_factory=list)  # what it was read from: a student's folds are keyed by their content

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


def from_output(reference: str, model: str, ids, roots=None) -> Teacher:
    """The teacher a finished run left in its output (``reference``: its folder, or its kernel's
    ``owner/slug`` attached): ``model``'s out-of-fold predictions with each row's fold (oof.parquet), and each
    fold model's predictions of every labelled row (``labelled_fold<k>.parquet``, written where its folds
    returned ``labelled``), in the order of ``ids``. Refused, naming the first difference, when it predicted
    other rows or left no fold's predictions of the labelled rows; ``check_folds`` then compares its folds
    with the student's."""
    import pandas as pd

    from ..submit.blend import locate
    from ..submit.oofsources import wide
    folder, ids = locate(reference, roots), np.asarray(ids).astype(str)
    split = _labelled_folder(folder, reference)
    oof = pd.read_parquet(folder / "oof.parquet").astype({"id": str})
    files = sorted(split.glob("labelled_fold*.parquet"), key=lambda f: int(f.stem.removeprefix("labelled_fold")))
    labelled = [pd.read_parquet(f).astype({"id": str}) for f in files]
    lacking = sorted(set(ids) - set(labelled[0]["id"]))
    if model not in oof.columns or lacking:
        what = f"no {model!r} predictions" if model not in oof.columns else \
            f"{len(lacking)} of our rows unknown to it (e.g. id {lacking[0]})"
        raise DistillError(f"teacher_dir {folder.name}: {what}: attach a teacher of this notebook, this "
                           "competition and this train.csv")
    folds = oof[oof["step"] == 0].set_index("id")["fold"].reindex(ids)
    metrics = json.loads((folder / "metrics.json").read_text()) if (folder / "metrics.json").exists() else {}
    print(f"teacher {model}@{folder.name}: {len(files)} fold models' predictions of every labelled row")
    return Teacher(f"{model}@{folder.name}", folds.fillna(-1).to_numpy(int), wide(oof, model, ids), ids=ids,
                   fold_labelled=[wide(f, model, ids) for f in labelled], prediction_s=metrics.get("test_predict_s"),
                   files=[folder / "oof.parquet", *files])


def _labelled_folder(folder, reference: str):
    """The one folds folder of a teacher's output that holds its fold models' predictions of the labelled rows."""
    found = sorted({f.parent for f in (folder / "folds").glob("*/labelled_fold0.parquet")})
    lacking = ("no oof.parquet" if not (folder / "oof.parquet").exists() else
               "no fold model's predictions of every labelled row" if not found else
               f"{len(found)} folds folders of fold models' predictions ({', '.join(f.name for f in found)})")
    if not (folder / "oof.parquet").exists() or len(found) != 1:
        raise DistillError(f"teacher_dir {reference!r}: {lacking}: run the teacher with teach=True to its end "
                           "(every fold done) and attach its output folder")
    return found[0]


def log_prediction_s(run, seconds: float, teacher: Teacher | None = None) -> None:
    """The seconds this run took to predict the test rows, logged (``test_predict_s``: what a student of it is
    compared with) and, beside its teacher's, printed: what a student saves the scoring rerun."""
    run.log(test_predict_s=seconds)
    if teacher is not None and teacher.prediction_s:
        print(f"the test rows predicted in {seconds:.1f} s, by the teacher ({teacher.name}) in "
              f"{teacher.prediction_s:.1f} s: {teacher.prediction_s / max(seconds, 1e-9):.1f}x the teacher's speed")


def beside(teacher: Teacher | None, scale: float = 1.0) -> dict[str, float]:
    """The teacher's seconds on the hidden test (its run's test prediction, ``scale`` times as many rows), for
    a rerun plan's ``beside``: the student's plan shows what it saves the rerun's clock. Empty without one."""
    if teacher is None or not teacher.prediction_s:
        return {}
    return {f"its teacher ({teacher.name})": teacher.prediction_s * scale}


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
        return ((weight * kl).sum() * temperature ** 2 + (1 - mix) * ce) / len(hard)  # rows (x may be a dict)
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
