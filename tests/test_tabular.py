"""Tabular competitions: metrics by name as scikit-learn scores them, the competition's layout
read with its quirks, hill climbing and stacking scored honestly, other kernels' OOFs joined by
id, and the units shared out over worker processes."""
import os
import time

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn import metrics as sk

import kagglekit as kk
from kagglekit.parallel import workers
from kagglekit.run import oofio, workpool
from kagglekit.score import hillclimb, scoring, stacking
from kagglekit.submit import oofsources, submission
from kagglekit.submit.blend import BlendError
from kagglekit.tables import competition, playground
from kagglekit.tables.timeseries import TableError

RNG = np.random.default_rng(0)


def _multiclass(n=300, c=7):
    y = RNG.integers(0, c, n)
    logits = RNG.normal(size=(n, c)) + 1.5 * np.eye(c)[y]
    return y, np.exp(logits) / np.exp(logits).sum(1, keepdims=True)


def _by_hand(name, y, pred):
    """Each metric straight from scikit-learn (MAP@3 from its definition)."""
    if name == "map@3":
        top = np.argsort(-pred, 1)[:, :3]
        return np.mean([1 / (list(t).index(t_) + 1) if t_ in t else 0 for t, t_ in zip(top, y)])
    return {"auc": lambda: sk.roc_auc_score(y, pred), "logloss": lambda: sk.log_loss(y, pred),
            "accuracy": lambda: sk.accuracy_score(y, pred.argmax(1) if pred.ndim > 1 else pred > 0.5),
            "rmse": lambda: np.sqrt(sk.mean_squared_error(y, pred)), "mae": lambda: sk.mean_absolute_error(y, pred),
            "r2": lambda: sk.r2_score(y, pred)}[name]()


@pytest.mark.parametrize("name", ["auc", "logloss", "accuracy", "map@3", "rmse", "mae", "r2"])
def test_every_metric_scores_as_scikit_learn_does_alone_and_in_a_batch(name):
    if name in ("rmse", "mae", "r2"):
        y = RNG.normal(size=200)
        preds = [y + RNG.normal(size=200) * s for s in (0.3, 1.0)]
        metric = scoring.get(name)
    elif name in ("auc",) or (name == "logloss"):
        y = RNG.integers(0, 2, 200)
        # rounded: ties between positives and negatives, which scikit-learn counts a half
        preds = [np.clip(np.round(0.5 * y + RNG.random(200) * s, 1), 0.05, 0.95) for s in (0.7, 1.0)]
        metric = scoring.get(name, 2)
    else:
        y, first = _multiclass()
        preds = [first, _multiclass()[1]]
        metric = scoring.get(name, 7)
    for pred in preds:
        assert metric.score(y, pred) == pytest.approx(_by_hand(name, y, pred), rel=1e-9, abs=1e-12)
    batch = metric.batch(torch.as_tensor(y), torch.as_tensor(np.stack(preds)))
    assert batch.numpy() == pytest.approx([metric.score(y, p) for p in preds], rel=1e-6, abs=1e-9)


def test_rmsle_is_an_rmse_where_the_models_learn_and_its_submission_comes_back_in_units():
    metric = scoring.get("RMSLE")
    y = np.array([0.0, 3.0, 10.0, 100.0])
    pred = np.array([1.0, 2.0, 12.0, 80.0])
    by_sklearn = np.sqrt(sk.mean_squared_log_error(y, pred))
    assert metric.score(metric.to_space(y), metric.to_space(pred)) == pytest.approx(by_sklearn)
    assert metric.submission(metric.to_space(pred), None) == pytest.approx(pred)


def test_the_submission_holds_what_each_metric_reads():
    proba = np.array([[0.1, 0.5, 0.15, 0.25], [0.7, 0.1, 0.1, 0.1]])
    classes = ["14-35-14", "DAP", "Urea", "28-28"]
    assert list(scoring.get("map@3", 4).submission(proba, classes)) == ["DAP 28-28 Urea", "14-35-14 DAP Urea"]
    assert list(scoring.get("accuracy", 4).submission(proba, classes)) == ["DAP", "14-35-14"]
    assert list(scoring.get("accuracy", 2).submission(np.array([0.2, 0.9]), ["no", "yes"])) == ["no", "yes"]
    assert list(scoring.get("auc", 2).submission(np.array([0.2, 0.9]), [0, 1])) == [0.2, 0.9]


def test_a_metric_that_does_not_fit_is_refused_naming_the_choices():
    with pytest.raises(scoring.MetricError, match="'f1' is not one the kit scores: use one of .*map@3"):
        scoring.get("f1")
    with pytest.raises(scoring.MetricError, match="pick a regression metric"):
        scoring.get("auc", 1)
    with pytest.raises(scoring.MetricError, match="more than three classes"):
        scoring.get("MAP@3", 3)
    assert scoring.classifies("ROC_AUC") and not scoring.classifies("RMSE")


def test_the_competition_is_read_with_its_quirks_and_the_original_joins_training_only(tmp_path):
    """Playground S5E6's layout (tables/playground.py): text categories, words as labels,
    test ids after train's; the original without an id and with "Humidity "; a gap, a free-text
    column and a train-only column, as real competitions have them."""
    folder = playground.write(tmp_path / "c", rows=300, test_rows=100)
    train = pd.read_csv(folder / "train.csv")
    train.loc[3, "Moisture"] = np.nan  # a numeric gap stays a gap
    train["Name"] = [f"farm {i}" for i in range(len(train))]  # free text: dropped
    train["Yield"] = 1.0  # in train only (a leak): dropped
    train.to_csv(folder / "train.csv", index=False)
    test = pd.read_csv(folder / "test.csv")
    test["Name"] = [f"farm {i}" for i in range(len(test))]
    test.to_csv(folder / "test.csv", index=False)
    original = playground.write_original(tmp_path / "o" / "Fertilizer Prediction.csv", rows=40)
    comp = competition.read(folder, classification=True, original_csv=original)
    assert comp.target == "Fertilizer Name" and comp.id_column == "id"
    assert comp.n_competition == 300 and len(comp.features) == 340 and len(comp.original) == 40
    assert list(comp.features["is_original"][:300].unique()) == [0] and (comp.features["is_original"][300:] == 1).all()
    assert comp.features["Humidity"][300:].notna().all()  # "Humidity " matched by name
    assert np.isnan(comp.features["Moisture"][3]) and comp.features["Moisture"].isna().sum() == 1
    assert comp.categorical == ["Soil Type", "Crop Type"]
    assert str(comp.features["Crop Type"].dtype) == "category" and str(comp.test["Crop Type"].dtype) == "category"
    assert set(comp.dropped) == {"Name", "Yield"} and "Name" not in comp.test
    assert comp.classes == list(playground.FERTILIZERS) and comp.y.max() == 6
    assert comp.test_ids[0] == 300 and list(comp.ids[-1:]) == ["original-39"]
    assert list(comp.training(np.array([0, 1]))) == [0, 1, *range(300, 340)]
    assert comp.files == [folder / "train.csv", folder / "test.csv", original]


def test_an_original_with_other_labels_or_a_folder_without_the_files_is_refused(tmp_path):
    folder = playground.write(tmp_path / "c", rows=100, test_rows=20)
    original = pd.read_csv(playground.write_original(tmp_path / "o.csv", rows=10))
    original["Fertilizer Name"] = "yes"
    original.to_csv(tmp_path / "o.csv", index=False)
    with pytest.raises(TableError, match=r"original_csv's target holds \['yes'\]"):
        competition.read(folder, classification=True, original_csv=tmp_path / "o.csv")
    (folder / "sample_submission.csv").unlink()
    with pytest.raises(TableError, match="lacks sample_submission.csv"):
        competition.read(folder, classification=True)


def test_per_class_probability_columns_are_matched_to_their_classes(tmp_path):
    pd.DataFrame({"id": [5, 6], "Status_C": 0.3, "Status_CL": 0.3, "Status_D": 0.4}).to_csv(
        tmp_path / "sample_submission.csv", index=False)
    proba = np.array([[0.7, 0.1, 0.2], [0.2, 0.2, 0.6]])
    frame, schema = submission.from_columns(tmp_path, [5, 6], proba, ["C", "CL", "D"])
    assert submission.check(frame, schema) == 2
    assert list(frame["Status_D"]) == [0.2, 0.6] and list(frame["Status_CL"]) == [0.1, 0.2]


def test_hill_climbing_takes_a_negative_weight_that_cancels_a_shared_bias():
    n = 2000
    y, z = RNG.normal(size=n), RNG.normal(size=n)
    oof = {"a": y + 0.3 * RNG.normal(size=n) + 0.5 * z, "b": y + 0.3 * RNG.normal(size=n) + 2.0 * z}
    metric = scoring.get("rmse")
    climb = hillclimb.climb(oof, y, metric, device="cpu")
    assert climb.steps[0]["model"] == "a"  # the best single model starts
    # the variance of (1 - w) a + w b: 0.09 (1 - w)^2 + 0.09 w^2 + (0.5 + 1.5 w)^2, least at w = -0.66 / 2.43
    assert climb.weights["b"] == pytest.approx(-0.66 / 2.43, abs=0.02)
    assert sum(climb.weights.values()) == pytest.approx(1.0)
    assert climb.score < metric.score(y, oof["a"]) - 0.1
    assert climb.score == pytest.approx(metric.score(y, climb.apply(oof)), rel=1e-5)


def test_each_step_of_the_climb_is_the_best_of_every_model_and_weight():
    y, _ = _multiclass(400, 5)
    oof = {f"m{i}": _multiclass(400, 5)[1] * 0.5 + np.eye(5)[y] * 0.1 * i for i in range(4)}
    metric = scoring.get("logloss", 5)
    climb = hillclimb.climb(oof, y, metric, max_steps=1, device="cpu")
    start = oof[climb.steps[0]["model"]]
    brute = min((metric.score(y, (1 - w) * start + w * v), m, w) for m, v in oof.items()
                for w in hillclimb.GRID if w != 0)
    assert (climb.steps[1]["model"], climb.steps[1]["weight"]) == (brute[1], brute[2])
    assert climb.score == pytest.approx(brute[0], rel=1e-4)


def test_the_ensembles_cv_does_not_flatter_them_on_noise():
    """Thirty models of pure noise: a climb scored where it was fitted finds 'signal'; the
    cross-validated climb and the stack, fitted on other folds, stay near chance."""
    n = 600
    y = RNG.integers(0, 2, n)
    oof = {f"noise{i}": RNG.random(n) for i in range(30)}
    fold_of = np.arange(n) % 5
    metric = scoring.get("auc", 2)
    flattering = hillclimb.climb(oof, y, metric, device="cpu").score
    honest, _ = hillclimb.cross_validated(oof, y, fold_of, metric, device="cpu")
    stacked = stacking.stack(oof, y, fold_of, "binary")
    assert flattering > 0.58
    assert metric.score(y, honest) < 0.55 and metric.score(y, stacked.oof) < 0.56


def test_the_stack_combines_two_views_better_than_either():
    n = 1000
    signal = RNG.normal(size=n)
    y = (signal + 0.5 * RNG.normal(size=n) > 0).astype(int)
    logistic = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    oof = {"a": logistic(signal + RNG.normal(size=n)), "b": logistic(signal + RNG.normal(size=n))}
    test = {m: v[:10] for m, v in oof.items()}
    stacked = stacking.stack(oof, y, np.arange(n) % 5, "binary", test)
    metric = scoring.get("auc", 2)
    assert metric.score(y, stacked.oof) > max(metric.score(y, v) for v in oof.values()) + 0.01
    assert stacked.test.shape == (10,) and set(stacked.coefficients) == {"a", "b"}


def _kernel_output(folder, ids, fold_of, target, models, test_ids):
    """What a tabular kernel leaves: oof.parquet and test.parquet (``oofio``'s layout)."""
    folder.mkdir(parents=True)
    oof = {m: v for m, (v, _) in models.items()}
    test = {m: t for m, (_, t) in models.items()}
    oofio.write(folder, folder, np.asarray(ids).astype(str), fold_of, oof, test, {}, target, test_ids)
    return folder


def test_another_kernels_oofs_join_by_id_and_are_refused_on_other_folds_or_rows(tmp_path):
    ids, fold_of, y = np.arange(100, 130), np.arange(30) % 3, RNG.integers(0, 3, 30).astype(float)
    oof, test, test_ids = RNG.random((30, 3)), RNG.random((5, 3)), np.arange(500, 505)
    order = RNG.permutation(30)  # the other kernel's rows in another order
    kernel = _kernel_output(tmp_path / "kernel-b", ids[order], fold_of[order], y[order],
                            {"lightgbm": (oof[order], test)}, test_ids)
    joined = oofsources.read(str(kernel), ids, fold_of, test_ids, target=y)
    assert list(joined) == ["lightgbm@kernel-b"]
    assert np.allclose(joined["lightgbm@kernel-b"][0], oof) and np.allclose(joined["lightgbm@kernel-b"][1], test)
    other_folds = _kernel_output(tmp_path / "kernel-c", ids, (fold_of + 1) % 3, y, {"m": (oof, test)}, test_ids)
    with pytest.raises(BlendError, match="its folds differ from ours.*same folds, seed"):
        oofsources.read(str(other_folds), ids, fold_of, test_ids)
    other_rows = _kernel_output(tmp_path / "kernel-d", ids + 1, fold_of, y, {"m": (oof, test)}, test_ids)
    with pytest.raises(BlendError, match="its OOF rows are not ours"):
        oofsources.read(str(other_rows), ids, fold_of, test_ids)
    with pytest.raises(BlendError, match="no such folder"):
        oofsources.read(str(tmp_path / "nowhere"), ids, fold_of, test_ids)


DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "data_dir": "", "k": 1}


@pytest.fixture
def pool_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")  # two workers, one per emulated T4
    return kk.start(dict(DECLARED), "pool", declared=dict(DECLARED), verbose=False)


def _square(value, meeting=None):
    """A job; with ``meeting``, it waits (up to a minute) until two processes have taken jobs,
    so the test knows the pool shares them, however loaded the machine."""
    def job(threads):
        if meeting is not None:
            (meeting / str(os.getpid())).touch()
            deadline = time.monotonic() + 60
            while len(list(meeting.iterdir())) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        return {"value": torch.tensor(float(value) ** 2), "pid": os.getpid(), "threads": threads}
    return job


def _stopped(threads):
    raise kk.Unfinished("cut short at the deadline")


def test_the_pool_does_each_unit_once_over_two_processes_and_a_rerun_none(pool_run, tmp_path):
    (tmp_path / "meeting").mkdir()
    jobs = [(pool_run.unit(f"sq{i}", config={"i": i}), _square(i, tmp_path / "meeting")) for i in range(6)]
    first = workpool.share(pool_run, jobs)
    assert {k: float(v["value"]) for k, v in first.items()} == {f"sq{i}": float(i * i) for i in range(6)}
    pids = {v["pid"] for v in first.values()}
    assert len(pids) == 2 and os.getpid() not in pids  # both workers took jobs, none ran here
    assert {v["threads"] for v in first.values()} == {workers.threads_each(2)}
    assert {pool_run.chain[f"cache:sq{i}"] for i in range(6)} == {"computed"}
    assert sorted(e["name"] for e in pool_run.cache.events if not e["hit"]) == [f"sq{i}" for i in range(6)]
    again = workpool.share(pool_run, jobs)
    assert {k: v["pid"] for k, v in again.items()} == {k: v["pid"] for k, v in first.items()}  # stored, not redone
    assert {pool_run.chain[f"cache:sq{i}"] for i in range(6)} == {"hit"}


def test_a_unit_cut_short_is_left_pending_and_the_others_are_kept(pool_run):
    jobs = [(pool_run.unit("fine", config={}), _square(3)), (pool_run.unit("cut", config={}), _stopped)]
    done = workpool.share(pool_run, jobs, workers=1)
    assert list(done) == ["fine"] and pool_run.chain["cache:cut"] == "pending"


def _notebook_metrics(out):
    import json
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.slow
@pytest.mark.e2e
def test_the_tabular_notebook_on_a_playground_layout_and_another_kernels_oofs_join_it(tmp_path, monkeypatch):
    """On T4 x2 emulated: the Playground layout with its original data set, pseudo-labels and an MLP
    student of the GBDTs (both from each fold's own teachers, kk.distill); a
    second kernel's OOFs (other models, the same folds) join the hill climb and the stack of the
    first, whose own models are found stored."""
    from test_notebooks import assert_reads_as_a_report

    from kagglekit.tools.notebook_runner import run_notebook
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    folder = playground.write(tmp_path / "s5e6", rows=500, test_rows=150)
    original = playground.write_original(tmp_path / "original" / "Fertilizer Prediction.csv")
    notebook = os.path.join(os.path.dirname(__file__), "..", "notebooks", "tabular.ipynb")
    params = {"smoke": True, "data_dir": str(folder), "original_csv": str(original), "pseudo_labels": 0.3,
              "student": True}
    out = run_notebook(notebook, params, output_dir=tmp_path / "first", progress=False)
    first = _notebook_metrics(out)
    models = {"lightgbm", "xgboost", "catboost", "mlp", "linear", "lightgbm+pl", "xgboost+pl", "catboost+pl",
              "mlp+student"}
    rows = {r["model"]: r for r in first["models"]}
    assert models <= set(rows) and {"hill_climb", "stack"} <= set(rows)
    assert rows["xgboost"]["device"] == rows["catboost"]["device"] == "cuda (emulated: ran on the CPU)"
    assert all(len(rows[m]) > 5 and rows[m]["std"] >= 0 for m in models)  # per-fold CV, spread, time, device
    assert sum(first["hill_climb"]["weights"].values()) == pytest.approx(1.0)
    best = max(r["cv"] for m, r in rows.items() if m in models)
    assert first["cv_submitted"]["score"] >= best - 1e-12  # the best of single, climb and stack
    assert first["summary"][0]["passed"] is True  # judged against the next best, never against itself
    submission = pd.read_csv(out / "submission.csv")
    assert list(submission["id"]) == list(pd.read_csv(folder / "test.csv")["id"])
    picks = submission["Fertilizer Name"].str.split(" ")
    assert picks.map(len).eq(3).all() and picks.map(lambda p: set(p) <= set(playground.FERTILIZERS) and
                                                    len(set(p)) == 3).all()
    assert set(pd.read_parquet(out / "oof.parquet").columns) >= models | {"id", "fold", "target", "submitted"}
    for model in ("lightgbm", "xgboost", "catboost", "mlp", "linear"):  # a search per model (the smoke's 2 trials)
        assert first[f"search_{model}"]["trials"] == {"COMPLETE": 2}
    assert set(first["params"]["mlp"]) == {"hidden", "lr", "dropout"} and set(first["params"]["linear"]) == {"c"}
    assert_reads_as_a_report(out, "tabular")

    # a rerun trains nothing and rebuilds the same submission: the sandbox's versions 2 and 3 check it
    # (tests/test_sandbox.py, _check_the_tabular_versions), in Kaggle's image

    other = run_notebook(notebook, {**params, "models": "linear,mlp", "linear_c": 0.2, "pseudo_labels": 0.0},
                         output_dir=tmp_path / "other-kernel", progress=False)
    joined = _notebook_metrics(run_notebook(notebook, {**params, "oof_sources": str(other)}, output_dir=out,
                                            progress=False))
    assert joined["cache"]["misses"] == 0  # the own models: stored
    assert {"linear@other-kernel", "mlp@other-kernel"} <= {r["model"] for r in joined["models"]}


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("name", ["breast_cancer", "diabetes"])
def test_on_real_data_the_notebooks_models_score_as_plain_calls_on_the_same_folds(tmp_path, name):
    """Breast Cancer Wisconsin (AUC) and Diabetes (RMSE), scikit-learn's copies written as a
    competition (benchmarks/tabular_real.py): the notebook's LightGBM and linear model score
    what a plain ``lightgbm.train`` and a plain scikit-learn pipeline score on the same folds,
    and land where the literature puts these data (AUC about 0.99; RMSE about 54, the residual
    of Efron et al.'s least squares fit, R^2 0.518)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import tabular_real

    from kagglekit.tools.notebook_runner import run_notebook
    target, metric = tabular_real.SETS[name]
    folder, solution = tabular_real.write(name, tmp_path / "data")
    notebook = os.path.join(os.path.dirname(__file__), "..", "notebooks", "tabular.ipynb")
    out = run_notebook(notebook, {"data_dir": str(folder), "metric": metric, "models": "lightgbm,linear"},
                       output_dir=tmp_path / name, progress=False)
    metrics = _notebook_metrics(out)
    assert metrics["cache"]["misses"] == 10  # 2 models x 5 folds, computed here (no GPU) and recorded once
    rows = {r["model"]: r["cv"] for r in metrics["models"]}
    plain = tabular_real.plain_references(folder, target, metric)
    assert rows["lightgbm"] == pytest.approx(plain["lightgbm (plain)"], rel=1e-9)
    assert rows["linear"] == pytest.approx(plain["linear (plain)"], rel=1e-9)
    held_out = tabular_real.held_out(out, solution, target, metric)
    if metric == "auc":
        assert min(rows["lightgbm"], rows["linear"], held_out) > 0.98
    else:
        assert 50 < rows["linear"] < 57 and held_out < 62


def test_a_student_without_its_mlp_is_refused_before_any_model_trains(tmp_path):
    from kagglekit.tools.notebook_runner import run_notebook
    notebook = os.path.join(os.path.dirname(__file__), "..", "notebooks", "tabular.ipynb")
    with pytest.raises(Exception, match=r"student=True trains an MLP taught by the GBDTs: add mlp to models='lightgb"):
        run_notebook(notebook, {"smoke": True, "student": True, "models": "lightgbm"}, output_dir=tmp_path / "run",
                     progress=False)
    assert not list(tmp_path.rglob("cache/*.pt")) and not list(tmp_path.rglob("folds"))  # nothing trained
