"""Gradient-boosted trees: the device each library trains on, and Optuna pruning."""
import json

import numpy as np
import optuna
import pytest

from kagglekit import boosting


@pytest.fixture
def regression():
    rng = np.random.default_rng(0)
    x = rng.random((400, 5))
    return x, 3 * x[:, 0] + np.sin(6 * x[:, 1]) + 0.1 * rng.standard_normal(400)


def _study():
    return optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0))


def test_an_xgboost_trial_that_learns_nothing_is_pruned_while_it_trains(regression):
    import xgboost as xgb
    x, y = regression
    train, val = xgb.DMatrix(x[:300], label=y[:300]), xgb.DMatrix(x[300:], label=y[300:])
    rounds = []

    def objective(trial):
        eta = trial.suggest_float("eta", 1e-6, 0.3, log=True)
        booster = xgb.train({"eta": eta, "eval_metric": "mae", "nthread": 1}, train, 60, evals=[(val, "val")],
                            early_stopping_rounds=100,
                            verbose_eval=False, callbacks=[boosting.xgboost_pruning(trial, "mae")])
        rounds.append(booster.num_boosted_rounds())
        return booster.best_score

    study = _study()
    study.enqueue_trial({"eta": 0.3})
    study.enqueue_trial({"eta": 1e-6})  # barely moves from the mean: worse at every report
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(objective, n_trials=2)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "PRUNED"]
    assert rounds == [60]  # the pruned trial stopped before its 60 rounds


def test_a_lightgbm_trial_that_learns_nothing_is_pruned_while_it_trains(regression):
    import lightgbm as lgb
    x, y = regression
    iterations = []

    def objective(trial):
        rate = trial.suggest_float("learning_rate", 1e-6, 0.3, log=True)
        train = lgb.Dataset(x[:300], y[:300])
        val = lgb.Dataset(x[300:], y[300:], reference=train)
        hook = boosting.lightgbm_pruning(trial, "l1")
        record = lambda env: iterations.append(env.iteration)  # noqa: E731
        booster = lgb.train({"learning_rate": rate, "metric": "l1", "verbose": -1}, train, 60,
                            valid_sets=[val], valid_names=["val"], callbacks=[hook, record])
        return booster.best_score["val"]["l1"]

    study = _study()
    study.enqueue_trial({"learning_rate": 0.3})
    study.enqueue_trial({"learning_rate": 1e-6})
    study.optimize(objective, n_trials=2)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "PRUNED"]
    assert len(iterations) < 60 + 60  # the second trial stopped early


def test_trees_train_on_the_cpu_without_a_gpu(monkeypatch):
    monkeypatch.delenv("KAGGLEKIT_FAKE_GPUS", raising=False)
    assert boosting.xgboost_device() == "cpu"
    assert boosting.lightgbm_device() == ("cpu", "no GPU")
    assert boosting.describe() == "XGBoost on cpu, LightGBM on cpu (no GPU)"  # what a notebook prints
    assert boosting.describe(["lightgbm"]) == "LightGBM on cpu (no GPU)"


def test_the_lightgbm_gpu_probe_trains_in_a_process_of_its_own_once(monkeypatch, tmp_path):
    """Training with device_type="gpu" opens the driver (OpenCL): never in the calling
    process, whose later forks it would break. The answer is kept for the next run."""
    import subprocess
    import tempfile

    import lightgbm
    monkeypatch.setenv("KAGGLEKIT_FAKE_GPUS", "Tesla T4:7.5:15,Tesla T4:7.5:15")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(lightgbm, "train", lambda *a, **k: pytest.fail("trained in this process"))
    boosting._probe_lightgbm.cache_clear()
    try:
        assert boosting.xgboost_device() == "cuda"
        device, why = boosting.lightgbm_device()  # this machine has no OpenCL device
        assert device == "cpu" and why.startswith("this LightGBM build has no usable GPU (")
        [answer] = (tmp_path / "kagglekit-probes").glob("lightgbm-*.json")
        boosting._probe_lightgbm.cache_clear()  # a new kernel session on the same machine
        monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("probed again"))
        assert boosting.lightgbm_device() == (device, why)
    finally:
        boosting._probe_lightgbm.cache_clear()


def test_predict_reads_either_library_from_the_trees_early_stopping_kept(regression, tmp_path):
    """The best iteration, not every tree grown: the rounds after it overfit a tiny validation set."""
    import lightgbm as lgb
    import xgboost as xgb
    x, y = regression
    train, val = xgb.DMatrix(x[:300], label=y[:300]), xgb.DMatrix(x[300:], label=y[300:])
    trees = xgb.train({"eta": 0.3, "nthread": 1}, train, 300, evals=[(val, "val")], early_stopping_rounds=5,
                      verbose_eval=False)
    kept = trees.best_iteration + 1
    assert kept < trees.num_boosted_rounds()
    trees.save_model(tmp_path / "m.ubj")  # the cache's own format: the best iteration travels with it
    again = xgb.Booster(model_file=tmp_path / "m.ubj")
    np.testing.assert_allclose(boosting.predict(again, x), trees.predict(xgb.DMatrix(x), iteration_range=(0, kept)))
    assert json.loads(again.save_config())["learner"]["generic_param"]["device"] == "cpu"
    booster = lgb.train({"learning_rate": 0.3, "verbose": -1, "num_threads": 1}, lgb.Dataset(x[:300], y[:300]), 300,
                        valid_sets=[lgb.Dataset(x[300:], y[300:])], callbacks=[lgb.early_stopping(5, verbose=False)],
                        keep_training_booster=True)  # the trees after the best one kept (train's default cuts them)
    assert 0 < booster.best_iteration < booster.current_iteration()
    np.testing.assert_allclose(boosting.predict(booster, x), booster.predict(x, num_iteration=booster.best_iteration))
    assert not np.allclose(boosting.predict(booster, x), booster.predict(x, num_iteration=-1))


def test_predict_without_early_stopping_uses_every_tree_and_raw_gives_margins(regression):
    import lightgbm as lgb
    import xgboost as xgb
    x, y = regression
    labels = (y > np.median(y)).astype(int)
    trees = xgb.train({"objective": "binary:logistic", "nthread": 1}, xgb.DMatrix(x, label=labels), 20)
    np.testing.assert_allclose(boosting.predict(trees, x), trees.predict(xgb.DMatrix(x)), rtol=1e-6)
    margin = boosting.predict(trees, x, raw=True)
    np.testing.assert_allclose(1 / (1 + np.exp(-margin)), boosting.predict(trees, x), rtol=1e-5)
    booster = lgb.train({"objective": "binary", "verbose": -1, "num_threads": 1}, lgb.Dataset(x, labels), 20)
    np.testing.assert_allclose(boosting.predict(booster, x, raw=True), booster.predict(x, raw_score=True))
