"""Students of a cross-validated teacher on real data (issue 87): scikit-learn's digits (1,797 scans),
a quarter held out as the test, 300 of the rest labelled and the others a pool whose labels are
hidden. The same 5 folds for every row; CV on the labelled validation rows only.

    python benchmarks/distill_digits.py [--labelled 300] [--epochs 80] [--seed 0]

Rows: the teacher (an RBF SVC per fold, the mean of the five on the test); a small MLP student
trained in ``kk.fit`` on the labelled rows alone; the same with the teacher's soft labels
(``kk.distill``, policy "oof" and "fold"); with pseudo-label rounds (each fold's pool labels from that
fold's teacher, the next round's teacher the last round's students, until CV stops improving); and
the planted leak: soft and pseudo labels from one SVC trained on every labelled row, which
``kk.distill.check_folds`` refuses, run anyway to measure the CV it would have inflated.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.svm import SVC

import kagglekit as kk
from kagglekit.run import distill


def data(labelled: int, seed: int):
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, stratify=y, random_state=seed)
    lab, pool = train_test_split(np.arange(len(x_train)), train_size=labelled, stratify=y_train, random_state=seed)
    return x_train[lab], y_train[lab], x_train[pool], x_test, y_test


def mlp(hidden: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def trained(x, hard, soft, epochs: int, seed: int, mix: float, temperature: float = 2.0, hidden: int = 32):
    """An MLP trained in ``kk.fit`` on ``(x, hard, soft)`` with the distillation loss (``mix`` 0: the hard labels)."""
    torch.manual_seed(seed)
    model = mlp(hidden)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(hard).long(),
                                             torch.from_numpy(soft).float())
    loader = kk.make_loader(dataset, 32, seed=seed, num_workers=0)
    kk.fit(model, torch.optim.Adam(model.parameters(), 3e-3), loader, distill.loss(temperature, mix), epochs=epochs,
           progress=False, monitor=False)
    return model.eval()


class Ensemble(torch.nn.Module):
    """The teacher: the mean of several wide MLPs' probabilities."""

    def __init__(self, members):
        super().__init__()
        self.members = torch.nn.ModuleList(members)

    def forward(self, x):
        return torch.log(torch.stack([torch.softmax(m(x), 1) for m in self.members]).mean(0))


def ensemble_teacher(x, y, pool, test, fold_of, args) -> tuple[distill.Teacher, list, float]:
    """Per fold, ``args.members`` MLPs of width 256 (seeds apart) on that fold's labelled training rows."""
    oof, fold_pool, fold_test, fold_train, seconds = np.zeros((len(x), 10)), [], [], [], 0.0
    for k in range(int(fold_of.max()) + 1):
        rows = fold_of != k
        model = Ensemble([trained(x[rows], y[rows], np.eye(10, dtype=np.float32)[y[rows]], args.epochs,
                                  100 * k + s, 0.0, hidden=256) for s in range(args.members)]).eval()
        oof[~rows] = probs(model, x[~rows])
        fold_pool.append(probs(model, pool))
        fold_train.append(probs(model, x))
        started = time.perf_counter()
        fold_test.append(probs(model, test))
        seconds += time.perf_counter() - started
    return distill.Teacher(f"{args.members} MLPs of width 256", fold_of, oof, fold_pool, fold_test), fold_train, seconds


def probs(model, x) -> np.ndarray:
    with torch.no_grad():
        return torch.softmax(model(torch.from_numpy(x)), 1).numpy()


def students(x, y, pool, test, fold_of, teacher, soft_of, pseudo, args) -> dict:
    """Each fold's student: its training rows with ``soft_of(k, rows)`` soft labels (None: one-hot), plus
    ``pseudo(k)`` (pool rows, soft labels) or none; its OOF, its pool and test predictions, the test time."""
    oof, fold_pool, fold_test, seconds = np.zeros((len(x), 10)), [], [], 0.0
    for k in range(int(fold_of.max()) + 1):
        rows = np.flatnonzero(fold_of != k)
        soft = soft_of(k, rows) if soft_of else np.eye(10, dtype=np.float32)[y[rows]]
        xs, hard = x[rows], y[rows]
        if pseudo:
            extra, labels = pseudo(k)
            xs, hard = np.concatenate([xs, pool[extra]]), np.concatenate([hard, -np.ones(len(extra), int)])
            soft = np.concatenate([soft, labels])
        mix = 0.0 if soft_of is None and not pseudo else args.mix  # 0: cross-entropy on the hard labels alone
        model = trained(xs, hard, soft.astype(np.float32), args.epochs, args.seed + k, mix, args.temperature)
        oof[fold_of == k] = probs(model, x[fold_of == k])
        fold_pool.append(probs(model, pool))
        started = time.perf_counter()
        fold_test.append(probs(model, test))
        seconds += time.perf_counter() - started
    return {"teacher": distill.Teacher("students", fold_of, oof, fold_pool, fold_test), "seconds": seconds}


def scored(name: str, oof, test_probs, y, y_test, seconds: float) -> dict:
    row = {"model": name, "cv": float((oof.argmax(1) == y).mean()),
           "test": float((test_probs.argmax(1) == y_test).mean()), "test_ms": round(seconds * 1000, 1)}
    print(f"{name:58s} CV {row['cv']:.4f}  test {row['test']:.4f}  predicting the test {row['test_ms']} ms", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labelled", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mix", type=float, default=0.7)
    parser.add_argument("--temperature", type=float, default=2.0)
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--members", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, y, pool, test, y_test = data(args.labelled, args.seed)
    fold_of = np.zeros(len(x), int)
    for k, (_, val) in enumerate(StratifiedKFold(5, shuffle=True, random_state=args.seed).split(x, y)):
        fold_of[val] = k
    reference = SVC(C=10, gamma=0.05)  # scikit-learn's plain reference on the same folds
    svc_oof = np.zeros(len(x), int)
    for k in range(5):
        svc_oof[fold_of == k] = reference.fit(x[fold_of != k], y[fold_of != k]).predict(x[fold_of == k])
    svc_test = reference.fit(x, y).predict(test)
    print(f"{'reference: RBF SVC, same folds':58s} CV {(svc_oof == y).mean():.4f}  "
          f"test {(svc_test == y_test).mean():.4f}")
    teacher, fold_train, t_seconds = ensemble_teacher(x, y, pool, test, fold_of, args)
    distill.check_folds(teacher, fold_of)
    rows = [scored(f"teacher: {teacher.name} per fold (5 folds' mean on the test)", teacher.oof, teacher.test, y,
                   y_test, t_seconds)]
    plain = students(x, y, pool, test, fold_of, teacher, None, None, args)
    rows.append(scored("student MLP, labelled rows only", plain["teacher"].oof, plain["teacher"].test, y, y_test,
                       plain["seconds"]))
    for policy in ("oof", "fold"):
        soft = students(x, y, pool, test, fold_of, teacher,
                        lambda k, r, p=policy: distill.soft_targets(teacher, k, r, p, fold_train[k]), None, args)
        rows.append(scored(f"student + soft labels ({policy})", soft["teacher"].oof, soft["teacher"].test, y, y_test,
                           soft["seconds"]))
    current, best = teacher, rows[-1]["cv"]
    for round_ in range(1, args.rounds + 1):
        labelled_by = current
        done = students(x, y, pool, test, fold_of, teacher,
                        lambda k, r: distill.soft_targets(teacher, k, r, "fold", fold_train[k]),
                        lambda k, t=labelled_by: distill.pseudo_labels(t, k, args.threshold), args)
        rows.append(scored(f"student + soft labels + pseudo-labels, round {round_}", done["teacher"].oof,
                           done["teacher"].test, y, y_test, done["seconds"]))
        if rows[-1]["cv"] <= best:
            print(f"round {round_}: CV stopped improving ({rows[-1]['cv']:.4f} <= {best:.4f}): the rounds stop")
            break
        current, best = done["teacher"], rows[-1]["cv"]
    leaky = Ensemble([trained(x, y, np.eye(10, dtype=np.float32)[y], args.epochs, 1000 + s, 0.0, hidden=256)
                      for s in range(args.members)]).eval()  # saw every labelled row
    planted = distill.Teacher("the ensemble on every row", None, probs(leaky, x), [probs(leaky, pool)] * 5,
                              [probs(leaky, test)] * 5)
    try:
        distill.check_folds(planted, fold_of)
    except distill.DistillError as refused:
        print(f"refused: {refused}")
    leak = students(x, y, pool, test, fold_of, planted, lambda k, r: planted.oof[r],
                    lambda k: distill.pseudo_labels(planted, k, args.threshold), args)
    rows.append(scored("planted leak: soft + pseudo labels, the teacher on every row", leak["teacher"].oof,
                       leak["teacher"].test, y, y_test, leak["seconds"]))


if __name__ == "__main__":
    main()
