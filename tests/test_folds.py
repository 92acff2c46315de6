"""Cross-validation as resumable units: the split kept, folds cached and skipped, a killed fold
resumed, the budget respected, the OOF predictions and their score right."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.model_selection import KFold, StratifiedKFold, TimeSeriesSplit

import kagglekit as kk
from kagglekit.run import folds as folds_mod, turns

REPO = Path(__file__).resolve().parents[1]
DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto", "data_dir": ""}


def _start(out: Path, **values):
    os.environ["KAGGLEKIT_OUTPUT"] = str(out)
    return kk.start({**DECLARED, **values}, "cv", declared=dict(DECLARED), verbose=False)


@pytest.fixture(autouse=True)
def _output_env():
    yield
    os.environ.pop("KAGGLEKIT_OUTPUT", None)


def _predict_mean(fold, x, y):
    """A model in one line: the training rows' mean, for every validation and test row."""
    value = float(np.mean(y[fold.train]))
    return kk.folds.Predictions(oof={"mean": np.full(len(fold.val), value)}, test={"mean": np.full(3, value)})


def test_the_oof_score_is_scikit_learns_metric_on_the_concatenated_oof_predictions(tmp_path):
    from sklearn.metrics import mean_absolute_error
    rng = np.random.default_rng(0)
    y = rng.normal(size=50)
    run = _start(tmp_path / "out")
    cv = kk.folds.CrossValidation(run, "m", KFold(5, shuffle=True, random_state=1), n=50,
                                  ids=[f"row{i}" for i in range(50)])
    result = cv.run(lambda f: _predict_mean(f, None, y), target=y,
                    metric=mean_absolute_error, test_ids=["a", "b", "c"])
    assert result.complete and result.done == [0, 1, 2, 3, 4]
    oof = pd.read_parquet(tmp_path / "out" / "oof.parquet")
    assert sorted(oof["id"]) == sorted(f"row{i}" for i in range(50)) and set(oof["fold"]) == set(range(5))
    assert result.scores["mean"]["oof"] == mean_absolute_error(oof["target"], oof["mean"])
    assert result.scores["mean"]["oof"] == pytest.approx(mean_absolute_error(y, result.oof["mean"]))
    per_fold = [mean_absolute_error(y[f.val], result.oof["mean"][f.val]) for f in cv.folds]
    assert result.scores["mean"]["per_fold"] == per_fold
    test = pd.read_parquet(tmp_path / "out" / "test.parquet")
    assert list(test["id"]) == ["a", "b", "c"]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["cv_m"]["scores"]["mean"]["mean"] == pytest.approx(np.mean(per_fold))


def test_the_test_set_is_predicted_by_each_finished_fold_once_per_test_content(tmp_path):
    """``cv.predict_test``: fold k's prediction of the test files, in a unit keyed by the folds
    and the files' content: the same files are read back, new ones predicted, nothing trains."""
    y = np.arange(20, dtype=float)
    test_file = tmp_path / "test.csv"
    test_file.write_text("id\na\nb\nc\n")
    log = tmp_path / "calls"  # a file, not a list: a closure's values are part of the unit's key

    def predict(fold):
        with log.open("a") as f:
            f.write(f"{fold.index}\n")
        rows = len(test_file.read_text().split()) - 1
        return {"mean": np.full(rows, float(np.mean(y[fold.train])))}

    def run_cv():
        run = _start(tmp_path / "out")
        cv = kk.folds.CrossValidation(run, "m", KFold(2), n=20)
        result = cv.run(lambda f: kk.folds.Predictions(oof={"mean": np.zeros(len(f.val))}), target=y,
                        test_ids=[str(i) for i in range(len(test_file.read_text().split()) - 1)])
        return cv, cv.predict_test(result, predict, data=[test_file])
    calls = lambda: [int(k) for k in log.read_text().split()]  # noqa: E731
    cv, result = run_cv()
    assert calls() == [0, 1] and np.allclose(result.fold_test[0]["mean"], 14.5)  # fold 0 trained on rows 10-19
    assert np.allclose(result.test["mean"], (14.5 + 4.5) / 2)
    assert list(pd.read_parquet(tmp_path / "out" / "test.parquet")["mean"]) == [9.5] * 3
    run_cv()
    assert calls() == [0, 1]  # the same test files: read back
    test_file.write_text("id\na\nb\nc\nd\n")
    _, result = run_cv()
    assert calls() == [0, 1, 0, 1] and len(result.test["mean"]) == 4  # other test files: predicted again
    with pytest.raises(ValueError, match=r"names \['other'\], which the folds' OOF predictions lack"):
        cv.predict_test(result, lambda fold: {"other": np.zeros(4)}, data=[test_file])


def test_a_folds_record_holding_arrays_is_a_cache_hit_in_the_next_run(tmp_path):
    """A record may carry a fold model's arrays (its probabilities of an unlabelled pool, for the next round
    of students): they come back equal, and the next run trains nothing (a cache entry loads with
    weights_only=True, which a pickled numpy array would fail: every run would have retrained the fold)."""
    import warnings
    trained = []

    def fold_with_a_pool(fold):
        trained.append(fold.index)
        pool = np.linspace(0, 1, 12).reshape(4, 3) + fold.index
        return kk.folds.Predictions(oof={"m": np.zeros(len(fold.val))}, record={"pool": pool, "rows": [len(pool)]})
    for _ in range(2):
        run = _start(tmp_path / "out")
        cv = kk.folds.CrossValidation(run, "pooled", KFold(2, shuffle=True, random_state=0), n=10)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an unusable cache entry is a warning, then a silent retraining
            result = cv.run(fold_with_a_pool, target=np.zeros(10), metric=lambda y, p: 0.0)
        assert np.array_equal(np.asarray(result.records[1]["pool"]), np.linspace(0, 1, 12).reshape(4, 3) + 1)
    assert trained == [0, 1]


def _rank_training(run, fold):
    """A fold trained on two ranks: each its half of the validation rows, rank 0's Predictions returned."""
    import torch.distributed as dist
    time.sleep(0.3)  # the training's time, which the record must hold
    mine = np.full(len(fold.val), float(run.rank + 1))
    gathered = [None] * run.world_size
    dist.all_gather_object(gathered, mine[run.rank::run.world_size])
    if not run.is_main:
        return None
    oof = np.empty(len(fold.val))
    for rank, part in enumerate(gathered):
        oof[rank::run.world_size] = part
    return kk.folds.Predictions(oof={"ranks": oof}, record={"world": run.world_size})


def test_a_fold_trained_on_two_ranks_is_rank_0s_predictions_with_its_seconds_kept_across_runs(tmp_path):
    """One form from the rank to the CV table: ``run.launch`` hands rank 0's Predictions back as they are
    (two gloo processes, as on the two T4s), the kit adds the training's seconds to the record, and the next
    run's cache hit carries the same seconds (what a scoring rerun's plan reads), training nothing."""
    seconds = []
    for _ in range(2):
        run = _start(tmp_path / "out")
        cv = kk.folds.CrossValidation(run, "ranks", KFold(2, shuffle=True, random_state=0), n=8)
        result = cv.run(lambda fold, run=run: run.launch(_rank_training, fold, nprocs=2), target=np.ones(8),
                        metric=lambda y, p: float(np.mean(p)))
        assert result.complete and result.scores["ranks"]["mean"] == pytest.approx(1.5)  # both ranks' rows
        assert [result.records[k]["world"] for k in (0, 1)] == [2, 2]
        seconds.append([result.records[k]["seconds"] for k in (0, 1)])
        assert run.cache.stats()["misses"] == (2 if len(seconds) == 1 else 0)
    assert min(seconds[0]) >= 0.3 and seconds[1] == seconds[0]


def test_a_fold_returning_a_plain_dict_is_refused_naming_the_form(tmp_path):
    run = _start(tmp_path / "out")
    cv = kk.folds.CrossValidation(run, "dicts", KFold(2), n=4)
    with pytest.raises(TypeError, match=r"returned dict: return kk.folds.Predictions.*rank 0's"):
        cv.run(lambda fold: {"oof": {"m": np.zeros(len(fold.val))}})


def test_the_ensemble_weights_are_fitted_out_of_fold_and_written_beside_the_models(tmp_path, capsys):
    """Multi-step targets (a horizon of 2): a model that is the truth plus a little noise, one that
    is pure noise; the weights find the first, sum to one, and the weighted OOF and test
    predictions join the models' in oof.parquet and test.parquet."""
    rng = np.random.default_rng(0)
    y = rng.normal(size=(40, 2))
    good, bad = y + 0.01 * rng.normal(size=y.shape), rng.normal(size=y.shape)

    def train(fold):
        return kk.folds.Predictions(oof={"good": good[fold.val], "bad": bad[fold.val]},
                                    test={"good": np.ones((3, 2)), "bad": np.zeros((3, 2))})
    run = _start(tmp_path / "out")
    cv = kk.folds.CrossValidation(run, "e", KFold(4), n=40)
    result = cv.run(train, target=y, test_ids=["a", "b", "c"])
    weights = cv.ensemble(result)
    assert list(weights) == ["good", "bad"] and sum(weights.values()) == pytest.approx(1)
    said = f"ensemble weights, fitted out of fold: good {weights['good']:.2f}, bad {weights['bad']:.2f}"
    assert said in capsys.readouterr().out
    assert weights["good"] > 0.95
    np.testing.assert_allclose(result.oof["ensemble"], weights["good"] * good + weights["bad"] * bad)
    np.testing.assert_allclose(result.test["ensemble"], np.full((3, 2), weights["good"]))
    for name in ("oof", "test"):
        assert list(pd.read_parquet(tmp_path / "out" / f"{name}.parquet").columns)[-3:] == ["good", "bad", "ensemble"]


def test_every_version_sees_the_same_folds_and_skips_the_done_ones(tmp_path, kaggle_tree):
    y = np.arange(60) % 2
    first = kk.start(dict(DECLARED), "cv", declared=dict(DECLARED), verbose=False)
    calls = []

    def train(f):
        calls.append(f.index)
        return _predict_mean(f, None, y)
    splitter = StratifiedKFold(3, shuffle=True, random_state=0)
    cv = kk.folds.CrossValidation(first, "s", splitter, n=60, y=y)
    cv.run(train)
    # The next kernel version: the previous output mounted read-only, a fresh working dir.
    previous = kaggle_tree / "input" / "notebooks" / "me" / "cv"
    previous.parent.mkdir(parents=True)
    os.rename(kaggle_tree / "working", previous)
    (kaggle_tree / "working").mkdir()
    kk.inputs.forget()
    again = kk.start(dict(DECLARED), "cv", declared=dict(DECLARED), verbose=False)
    cv2 = kk.folds.CrossValidation(again, "s", splitter, n=60, y=y)
    assert [f.val.tolist() for f in cv2.folds] == [f.val.tolist() for f in cv.folds]
    result = cv2.run(train)
    assert calls == [0, 1, 2] and result.complete  # every fold a cache hit in version 2
    assert set(again.chain.values()) == {"hit"}


class Clock:
    """Wall and monotonic time that move only when a fold trains (100 s each)."""

    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def test_a_budget_that_holds_two_folds_trains_two_and_names_the_rest(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(turns.time, "monotonic", clock)  # the loop of units in turn times them
    monkeypatch.setattr(kk.budget.time, "time", clock)
    y = np.arange(50.0)

    def train(f):
        clock.now += 100  # every fold takes 100 s
        return _predict_mean(f, None, y)
    run = _start(tmp_path / "out")
    run.deadline = clock.now + 250  # room for two folds of 100 s (and a margin), not three
    cv = kk.folds.CrossValidation(run, "t", KFold(5), n=50)
    result = cv.run(train)
    assert not result.complete and result.done == [0, 1] and result.pending == [2, 3, 4]
    assert result.message.startswith("folds 0-1 of 5 done, 2-4 next version")
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert "scores" not in metrics["cv_t"] and not (tmp_path / "out" / "oof.parquet").exists()
    later = _start(tmp_path / "out")  # the next session: a fresh budget; folds 0-1 are hits
    later.deadline = clock.now + 1000
    done = kk.folds.CrossValidation(later, "t", KFold(5), n=50).run(train)
    assert done.complete and [later.chain[f"cache:t-fold{k}"] for k in range(5)] == \
        ["hit", "hit", "computed", "computed", "computed"]


def test_a_fold_whose_training_stopped_early_is_not_cached_and_a_cap_per_version_holds(tmp_path):
    y = np.arange(40.0)
    run = _start(tmp_path / "out")
    stopped = kk.folds.CrossValidation(run, "u", KFold(4), n=40)
    def train(f):
        if f.index == 1:  # what a fit with the fold unit's checkpoints raises at the deadline
            raise kk.Unfinished(f"{f.name}: the session's time ran out")
        return _predict_mean(f, None, y)
    result = stopped.run(train)
    assert result.done == [0] and result.pending == [1, 2, 3]
    assert stopped.folds[0].unit.done and not stopped.folds[1].unit.done
    with pytest.raises(TypeError, match=r"returned NoneType: return kk.folds.Predictions"):
        kk.folds.CrossValidation(run, "n", KFold(2), n=40).run(lambda f: None)
    capped = kk.folds.CrossValidation(run, "c", TimeSeriesSplit(4), n=40)
    first = capped.run(lambda f: _predict_mean(f, None, y), per_version=2)
    assert first.done == [0, 1] and "folds 0-1 of 4 done, 2-3 next version" in first.message
    assert all(f.train.max() < f.val.min() for f in capped.folds)  # the past only, in time


def test_a_fold_of_some_rows_gives_masks_over_all_of_them(tmp_path):
    """A graph's folds split its labelled nodes only: the fold's nodes as masks over the graph."""
    import torch
    labelled = np.array([1, 3, 4, 6, 8, 9])
    cv = kk.folds.CrossValidation(_start(tmp_path / "out"), "g", KFold(3), n=len(labelled), ids=labelled)
    train, val = cv.folds[1].masks(labelled, 10)
    assert train.dtype == val.dtype == torch.bool and len(train) == len(val) == 10
    assert val.nonzero().view(-1).tolist() == [4, 6] and train.nonzero().view(-1).tolist() == [1, 3, 8, 9]

def test_the_summary_lines_say_each_models_cv_or_which_folds_remain(tmp_path):
    from sklearn.metrics import mean_absolute_error
    y = np.arange(40.0)
    run = _start(tmp_path / "out")
    cv = kk.folds.CrossValidation(run, "h", KFold(4), n=40)
    first = cv.run(lambda f: _predict_mean(f, None, y), per_version=3, target=y, metric=mean_absolute_error)
    assert first.headlines("MAE") == [kk.headline("CV MAE (folds 0-2 of 4 done, 3 next version: no CV score "
                                                  "until every fold is done)", None)]
    def two(f):
        mean = _predict_mean(f, None, y)
        return kk.folds.Predictions(oof={"zero": np.zeros(len(f.val)), **mean.oof})
    result = kk.folds.CrossValidation(run, "h2", KFold(4), n=40).run(two, target=y, metric=mean_absolute_error)
    lines = result.headlines("MAE", ["mean"], note="units")
    score = result.scores["mean"]
    assert [(h["result"], h["value"]) for h in lines] == [
        (f"CV MAE (mean), mean of 4 folds (std {score['std']:.4g}; units)", score["mean"])]
    assert [h["result"].split(")")[0] for h in result.headlines("MAE")] == ["CV MAE (zero", "CV MAE (mean"]
    single = kk.foldresults.CVResult(True, [0], [], "", scores={"m": {"per_fold": [0.5], "mean": 0.5, "std": 0.0}})
    assert [h["result"] for h in single.headlines("AUC")] == ["CV AUC (m), 1 fold"]  # no spread of one
    better = kk.folds.CrossValidation(run, "h3", KFold(4), n=40).run(two, target=y, metric=mean_absolute_error,
                                                                     higher_is_better=True)
    assert (result.higher_is_better, better.higher_is_better) == (False, True)  # the metric's direction kept


@pytest.mark.slow
def test_a_kill_in_the_middle_of_fold_2_resumes_it_and_ends_with_the_same_oof_bit_for_bit(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE")}
    job = [sys.executable, str(REPO / "tests" / "jobs" / "cv_job.py")]
    clean = subprocess.run(job, env={**env, "KAGGLEKIT_OUTPUT": str(tmp_path / "clean")},
                           capture_output=True, text=True, timeout=600)
    assert "COMPLETE" in clean.stdout, clean.stdout + clean.stderr
    killed_env = {**env, "KAGGLEKIT_OUTPUT": str(tmp_path / "killed")}
    proc = subprocess.Popen([*job, "0.02"], env=killed_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    fold2 = tmp_path / "killed" / "checkpoints" / "mlp-fold2"
    deadline = time.monotonic() + 300
    while len(list(fold2.rglob("step-*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not list((tmp_path / "killed" / "checkpoints").glob("mlp-fold3")), "killed too late"
    again = subprocess.run(job, env=killed_env, capture_output=True, text=True, timeout=600)
    assert "COMPLETE" in again.stdout, again.stdout + again.stderr
    chain = json.loads((tmp_path / "killed" / "metrics.json").read_text())["chain"]
    assert [chain[f"cache:mlp-fold{k}"] for k in range(5)] == ["hit", "hit", "computed", "computed", "computed"]
    assert "resumed from" in again.stdout and "mlp-fold2" in again.stdout
    a = pd.read_parquet(tmp_path / "clean" / "oof.parquet")
    b = pd.read_parquet(tmp_path / "killed" / "oof.parquet")
    assert a.equals(b)  # bit for bit
    test_file = lambda run: pd.read_parquet(tmp_path / run / "test.parquet")  # noqa: E731
    assert test_file("clean").equals(test_file("killed"))


def test_grouped_time_series_folds_never_split_a_date_and_validate_later_than_they_train():
    """Windows of three series at 40 dates (one series starting later, as a store opened late):
    plain TimeSeriesSplit puts one date's windows on both sides of a cut; Grouped never does,
    and every validation date is later than every training date of its fold."""
    dates = np.concatenate([np.arange(40), np.arange(40), np.arange(10, 40)])
    order = np.argsort(dates, kind="stable")
    when = dates[order]
    plain = list(TimeSeriesSplit(4).split(np.zeros((len(when), 1))))
    assert any(set(when[tr]) & set(when[va]) for tr, va in plain)  # what Grouped exists for
    grouped = list(folds_mod.Grouped(TimeSeriesSplit(4)).split(None, groups=when))
    assert len(grouped) == 4
    for train, val in grouped:
        assert when[train].max() < when[val].min()
        assert np.isin(np.flatnonzero(np.isin(when, when[val])), val).all()  # whole dates
    with pytest.raises(ValueError, match="pass groups="):
        next(folds_mod.Grouped(TimeSeriesSplit(4)).split(None))


def test_class_logits_keep_one_label_per_node_in_the_oof_file(tmp_path):
    """Several classes (Cora's seven, three here): a row of logits per node, one label each;
    oof.parquet holds a value per class (step) with the node's label beside each, and the CV
    accuracy is scikit-learn's on the argmax of the concatenated OOF logits."""
    from sklearn.metrics import accuracy_score
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=60)
    logits = rng.normal(size=(60, 3)) + 2 * np.eye(3)[y] * (rng.random((60, 1)) < 0.7)
    run = _start(tmp_path / "out")
    cv = kk.folds.CrossValidation(run, "c", StratifiedKFold(4, shuffle=True, random_state=0), n=60, y=y)
    result = cv.run(lambda f: kk.folds.Predictions(oof={"net": logits[f.val]}, test={"net": logits[:5]}),
                    target=y, metric=lambda t, p: accuracy_score(t, p.argmax(1)), higher_is_better=True)
    oof = pd.read_parquet(tmp_path / "out" / "oof.parquet")
    assert len(oof) == 180 and oof.groupby("id")["target"].nunique().eq(1).all()
    wide = oof.pivot(index="id", columns="step", values="net")
    labels = oof.groupby("id")["target"].first()
    assert result.scores["net"]["oof"] == accuracy_score(labels, wide.to_numpy().argmax(1))
