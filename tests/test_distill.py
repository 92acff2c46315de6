"""Soft labels and pseudo-labels that know which folds their teachers saw (kagglekit/run/distill.py)."""
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from kagglekit.run import distill

RNG = np.random.default_rng(0)


def _teacher(fold_of, folds=3, pool=7, classes=4, name="ensemble"):
    probs = lambda n: RNG.dirichlet(np.ones(classes), n)  # noqa: E731
    return distill.Teacher(name, fold_of, probs(len(fold_of)), [probs(pool) for _ in range(folds)],
                           [probs(5) for _ in range(folds)], ids=np.arange(len(fold_of)))


def test_a_teacher_of_other_or_unknown_folds_is_refused_naming_both():
    student = np.array([0, 1, 2, 0, 1, 2])
    distill.check_folds(_teacher(student), student, "mlp")  # the same folds: accepted
    with pytest.raises(distill.DistillError, match=r"teacher 'ensemble''s folds are not 'mlp''s \(2 of 6 rows"):
        distill.check_folds(_teacher(np.array([0, 1, 2, 0, 2, 1])), student, "mlp")
    with pytest.raises(distill.DistillError, match=r"teacher 'all rows' has no fold assignment .* 'mlp'"):
        distill.check_folds(distill.Teacher("all rows", None, np.zeros((6, 4))), student, "mlp")
    with pytest.raises(distill.DistillError, match="do not hold the same rows in the same order"):
        distill.check_folds(_teacher(student), student, "mlp", ids=np.arange(6)[::-1])


def test_each_fold_s_pseudo_labels_come_from_the_teacher_that_never_saw_it():
    teacher = _teacher(np.array([0, 1, 2, 0, 1, 2]))
    for k in range(3):
        rows, labels = distill.pseudo_labels(teacher, k, threshold=0.5)
        assert np.array_equal(rows, np.flatnonzero(teacher.fold_pool[k].max(1) >= 0.5))
        assert np.array_equal(labels, teacher.fold_pool[k][rows])
    assert np.allclose(teacher.test, np.mean(teacher.fold_test, axis=0))  # the test: every fold teacher's mean


def test_soft_targets_by_policy():
    teacher = _teacher(np.array([0, 1, 2, 0, 1, 2]))
    rows, own = np.array([1, 2, 4, 5]), [RNG.random((6, 4)) for _ in range(3)]
    assert np.array_equal(distill.soft_targets(teacher, 0, rows, "oof"), teacher.oof[rows])
    assert np.array_equal(distill.soft_targets(teacher, 0, rows, fold_train=own[0]), own[0][rows])  # the default
    with pytest.raises(distill.DistillError, match="needs fold k's teacher's predictions"):
        distill.soft_targets(teacher, 0, rows)


def test_the_loss_is_hinton_s_with_pseudo_labelled_rows_on_the_soft_term_alone():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 4)
    x, soft = torch.randn(6, 3), torch.softmax(torch.randn(6, 4), 1)
    hard = torch.tensor([0, 1, 2, 3, -1, -1])  # the last two: pseudo-labelled, no hard label
    temperature, mix = 3.0, 0.25
    got = distill.loss(temperature, mix)(model, (x, hard, soft))
    logits = model(x)
    target = torch.softmax(torch.log(soft) / temperature, 1)
    kl = (target * (target.log() - F.log_softmax(logits / temperature, 1))).sum(1)  # KL(target || student)
    weight = torch.tensor([mix] * 4 + [1.0, 1.0])
    want = ((weight * kl).sum() * temperature ** 2 + (1 - mix) * F.cross_entropy(logits[:4], hard[:4],
                                                                                 reduction="sum")) / 6
    assert torch.allclose(got, want, atol=1e-6)
    with pytest.raises(distill.DistillError, match="mix=1.5"):
        distill.loss(2.0, 1.5)


@pytest.mark.slow
def test_rounds_killed_in_round_two_resume_there_bitwise_under_the_t4x2_emulation(tmp_path):
    """tests/jobs/rounds_job.py: SIGKILL while round 2's second fold trains (round 1 and round 2's
    first fold finished), then the same job again: no finished round or fold trains again, and the
    last round's OOF predictions are the uninterrupted run's, bit for bit."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KAGGLE")}, "KAGGLEKIT_EMULATE": "t4x2"}
    job = [sys.executable, str(repo / "tests" / "jobs" / "rounds_job.py")]
    clean = subprocess.run(job, env={**env, "KAGGLEKIT_OUTPUT": str(tmp_path / "clean")}, capture_output=True,
                           text=True, timeout=600)
    finished = [line for line in clean.stdout.splitlines() if line.startswith("ROUNDS")]
    assert finished, clean.stdout[-2000:] + clean.stderr[-2000:]
    killed_env = {**env, "KAGGLEKIT_OUTPUT": str(tmp_path / "killed")}
    proc = subprocess.Popen([*job, "0.02"], env=killed_env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    deadline = time.monotonic() + 300
    for line in proc.stdout:  # round 2's fold 1 has started: round 1 and round 2's fold 0 are stored
        if line.startswith("training digits-round2-fold1") or time.monotonic() > deadline:
            break
    time.sleep(0.5)  # into its fit
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    again = subprocess.run(job, env=killed_env, capture_output=True, text=True, timeout=600)
    trained = [line.split()[1] for line in again.stdout.splitlines() if line.startswith("training ")]
    assert trained[:2] == ["digits-round2-fold1", "digits-round2-fold2"], again.stdout[-2000:]
    assert not [t for t in trained if t.startswith("digits-round1") or t == "digits-round2-fold0"]
    assert [line for line in again.stdout.splitlines() if line.startswith("ROUNDS")] == finished


def test_a_students_rows_are_its_labelled_ones_then_the_pool_with_its_teachers_probabilities():
    """``Taught`` reads rows by index: fold k's labelled rows (hard label, one-hot) then the pool (no hard
    label, fold k's teacher's probabilities), which ``loss`` trains on; a pool without one soft label a
    row is refused."""
    import torch

    from kagglekit.run import distill
    inputs, pool = torch.arange(10).float()[:, None], 100 + torch.arange(4).float()[:, None]
    labels = torch.tensor([0, 1, 2] * 3 + [0])
    soft = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    taught = distill.Taught(inputs, labels, np.array([3, 5]), pool, np.array([2, 0]), soft, 3)
    rows = [taught[i] for i in range(len(taught))]
    assert len(taught) == 4 and [float(x) for x, _, _ in rows] == [3.0, 5.0, 102.0, 100.0]
    assert [int(h) for _, h, _ in rows] == [0, 2, -1, -1]
    assert torch.equal(rows[1][2], torch.tensor([0.0, 0.0, 1.0]))
    assert torch.allclose(rows[2][2], torch.tensor(soft[0]).float())
    x, hard, target = (torch.stack(c) for c in zip(*rows))
    model = torch.nn.Linear(1, 3)
    assert torch.isfinite(distill.loss()(model, (x, hard, target)))
    with pytest.raises(distill.DistillError, match="3 pool rows and 2 soft labels"):
        distill.Taught(inputs, labels, np.array([3]), pool, np.array([0, 1, 2]), soft, 3)


def test_a_students_cpu_time_per_row_is_measured_beside_its_teachers():
    import torch

    from kagglekit.run import distill
    wide = torch.nn.Sequential(torch.nn.Linear(64, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    timed = distill.prediction_ms({"teacher": wide, "student": torch.nn.Linear(64, 10)}, torch.randn(256, 64))
    assert set(timed) == {"teacher", "student"} and 0 < timed["student"] < timed["teacher"]


def test_zoo_rounds_retrain_on_the_round_befores_labels_resume_as_hits_and_stop_when_cv_stops_improving(
        tmp_path, monkeypatch, capsys):
    """kk.rounds.zoo_rounds, the tabular notebook's GBDT rounds, on a model whose right share of its
    validation rows grows with its training rows: round 1's pseudo-labelled pool lifts CV from 0.7 to
    1, round 2 (taught by round 1's models, not the first) adds nothing and the rounds stop, said; run
    again, every (model, fold) of every round is a hit."""
    from sklearn.model_selection import KFold

    import kagglekit as kk
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    declared = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "data_dir": ""}
    run = kk.start(dict(declared), "rounds", declared=dict(declared), verbose=False)
    y, pool = np.arange(60) % 2, 40
    cv = kk.folds.CrossValidation(run, "toy", KFold(3, shuffle=True, random_state=0), n=60, y=y)

    def fold_data(fold):
        return {"y_train": y[fold.train], "y_val": y[fold.val]}

    def train(data, threads):
        right = np.arange(len(data["y_val"])) < min(1.0, len(data["y_train"]) / 60) * len(data["y_val"])
        return kk.folds.Predictions(oof=np.where(right, data["y_val"], 1 - data["y_val"]).astype(float),
                                    test=np.full(pool, 0.9))

    seen = []

    def teacher_of(result, names):
        seen.append(list(names))
        mean = lambda preds: np.stack([1 - np.mean([preds[m] for m in names], 0),  # noqa: E731
                                       np.mean([preds[m] for m in names], 0)], 1)
        return distill.Teacher("toy", cv.fold_of, mean(result.oof),
                               fold_pool=[mean(result.fold_test[k]) for k in range(3)])

    def data_with(teacher, fold):
        rows, probs = distill.pseudo_labels(teacher, fold.index, 0.5)
        return {**fold_data(fold), "y_train": np.concatenate([y[fold.train], probs.argmax(1)])}

    scoring = {"target": y, "metric": lambda t, p: float(np.mean(t == p)), "higher_is_better": True}
    zoo = {"toy": kk.zoo.Model(train, {})}
    first = kk.zoo.cross_validate(cv, zoo, fold_data, **scoring, workers=1)
    result = kk.rounds.zoo_rounds(cv, zoo, fold_data, {**scoring, "workers": 1}, first=first, taught=["toy"],
                                  teacher_of=teacher_of, data_with=data_with, rounds=4)
    assert seen == [["toy"], ["toy+pl"]]
    assert [round(result.scores[m]["mean"], 4) for m in ("toy", "toy+pl", "toy+pl2")] == [0.7, 1.0, 1.0]
    assert "toy+pl3" not in result.scores
    assert "pseudo-label round 2: its best CV 1 does not beat the round before's 1: the rounds stop" in \
        capsys.readouterr().out
    misses = sum(not e["hit"] for e in run.cache.events)
    again = kk.rounds.zoo_rounds(cv, zoo, fold_data, {**scoring, "workers": 1}, first=first, taught=["toy"],
                                 teacher_of=teacher_of, data_with=data_with, rounds=4)
    assert sum(not e["hit"] for e in run.cache.events) == misses and again.scores == result.scores


def _teacher_run(out, ids, labelled: bool = True, seed: int = 1):
    """A teacher's output as CrossValidation writes it: 3 folds of 12 rows, each fold model's probabilities of
    every labelled row (``labelled``) built so that row i's value says which fold model predicted it."""
    import os

    from sklearn.model_selection import KFold

    import kagglekit as kk
    declared = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto", "data_dir": ""}
    os.environ["KAGGLEKIT_OUTPUT"] = str(out)
    try:
        run = kk.start(dict(declared), "teacher", declared=dict(declared), verbose=False)
        cv = kk.folds.CrossValidation(run, "text", KFold(3, shuffle=True, random_state=seed), n=len(ids), ids=ids)

        def fold_model(fold):
            probs = np.stack([np.full(len(ids), fold.index / 10), 1 - np.full(len(ids), fold.index / 10)], 1)
            return kk.folds.Predictions(oof={"transformer": probs[fold.val]},
                                        labelled={"transformer": probs} if labelled else {})
        cv.run(fold_model, target=np.arange(len(ids)) % 2)
    finally:
        os.environ.pop("KAGGLEKIT_OUTPUT", None)
    return cv


def test_a_teacher_run_s_output_is_read_by_id_with_each_fold_model_s_predictions_of_every_row(tmp_path):
    ids = [f"t{i}" for i in range(12)]
    cv = _teacher_run(tmp_path / "teacher", ids)
    shuffled = ids[::-1]  # the student's train.csv in another order: aligned by id, never by position
    teacher = distill.from_output(str(tmp_path / "teacher"), "transformer", shuffled)
    assert teacher.name == "transformer@teacher" and len(teacher.fold_labelled) == 3
    assert [f.name for f in teacher.files] == ["oof.parquet"] + [f"labelled_fold{k}.parquet" for k in range(3)]
    for k in range(3):  # fold k's file is fold k's model's: its value on every row is k / 10
        assert np.allclose(teacher.fold_labelled[k][:, 0], k / 10)
    order = [ids.index(i) for i in shuffled]
    assert np.array_equal(teacher.fold_of, cv.fold_of[order])  # its folds, in the student's row order
    distill.check_folds(teacher, cv.fold_of[order], "this model")
    other = _teacher_run(tmp_path / "other", ids, seed=2).fold_of  # another seed: other folds, refused
    with pytest.raises(distill.DistillError, match=r"teacher 'transformer@teacher''s folds are not 'this model''s"):
        distill.check_folds(teacher, other, "this model")


def test_a_teacher_without_its_fold_models_predictions_or_of_other_rows_is_refused_naming_the_fix(tmp_path):
    ids = [f"t{i}" for i in range(12)]
    _teacher_run(tmp_path / "plain", ids, labelled=False)
    with pytest.raises(distill.DistillError, match="no fold model's predictions of every labelled row: run the "
                                                   "teacher with teach=True"):
        distill.from_output(str(tmp_path / "plain"), "transformer", ids)
    _teacher_run(tmp_path / "teacher", ids)
    with pytest.raises(distill.DistillError, match=r"1 of our rows unknown to it \(e\.g\. id t99\)"):
        distill.from_output(str(tmp_path / "teacher"), "transformer", ids + ["t99"])
    with pytest.raises(distill.DistillError, match="no 'deberta' predictions"):
        distill.from_output(str(tmp_path / "teacher"), "deberta", ids)


def test_a_text_student_s_loss_moves_it_toward_its_teacher_s_soft_labels_not_only_the_labels():
    """``kk.textstudent``: a fold's texts collated with the teacher's probabilities, the loss read off the
    classifier's logits; with the soft term alone a student follows soft labels that contradict the labels."""
    import tempfile

    from kagglekit.text import classifier, textsets, textstudent
    path = textsets.write_standin_model(Path(tempfile.gettempdir()) / "kagglekit-models", "bert", 0, 32, 1)
    tokenizer = classifier.load_tokenizer(path)
    texts = classifier.TokenizedTexts(tokenizer, ["the cat sat first", "then the dog ran", "a bird", "rain fell"],
                                      16, [0, 0, 0, 0])
    soft = np.tile([0.1, 0.9], (4, 1))  # the teacher says class 1, the labels class 0
    batch = classifier.collator(tokenizer)([textstudent.TaughtTexts(texts, soft)[i] for i in range(4)])
    assert batch["soft"].shape == (4, 2) and batch["labels"].tolist() == [0, 0, 0, 0]
    torch.manual_seed(0)
    model, _ = classifier.load_classifier(path, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(20):
        optimizer.zero_grad()
        textstudent.loss(temperature=1.0, mix=1.0)(model, batch).backward()
        optimizer.step()
    with torch.no_grad():
        probs = torch.softmax(model(**{k: v for k, v in batch.items() if k not in ("labels", "soft")}).logits, 1)
    assert probs[:, 1].mean() > 0.8, probs  # the soft labels, not the labels
    with pytest.raises(distill.DistillError, match="4 training texts .* and 3 rows of the teacher's probabilities"):
        textstudent.TaughtTexts(texts, soft[:3])
