"""Gradient-boosted trees on the GPU when there is one, and pruned by Optuna.

XGBoost trains on CUDA wherever this process has a GPU (a search worker's own card,
the notebook's first card). LightGBM's pip and Kaggle builds use OpenCL (its
``device_type="gpu"``), which a machine may lack even with a GPU: ``lightgbm_device``
tries it once and says which it uses. The pruning callbacks report the validation
metric to an Optuna trial while the trees grow and stop a poor trial early.
"""
from __future__ import annotations

import functools

from ..machine import gpus
from ..parallel import ranks

REPORT_EVERY = 10  # boosting rounds between reports (each is a write to the study)


def xgboost_device() -> str:
    """"cuda" where this process has a GPU to train on, else "cpu"."""
    return "cuda" if ranks.context().device.type == "cuda" or gpus.inventory() else "cpu"


@functools.lru_cache(maxsize=None)
def lightgbm_device() -> tuple[str, str]:
    """("gpu" or "cpu", why): the GPU when one is here and this LightGBM build reaches it."""
    if xgboost_device() == "cpu":
        return "cpu", "no GPU"
    import lightgbm
    import numpy as np
    x = np.random.default_rng(0).random((64, 2))
    try:
        lightgbm.train({"device_type": "gpu", "verbose": -1}, lightgbm.Dataset(x, x[:, 0]), 1)
    except lightgbm.basic.LightGBMError as err:
        return "cpu", f"this LightGBM build has no usable GPU ({str(err).splitlines()[0]})"
    return "gpu", "OpenCL GPU"


def _report(trial, value: float, step: int) -> None:
    import optuna
    trial.report(float(value), step)
    if trial.should_prune():
        raise optuna.TrialPruned(f"pruned at round {step} ({value:.4g})")


def xgboost_pruning(trial, metric: str, data: str = "val"):
    """An XGBoost callback reporting ``evals_log[data][metric]`` to ``trial``."""
    import xgboost

    class Pruning(xgboost.callback.TrainingCallback):
        def after_iteration(self, model, epoch: int, evals_log) -> bool:
            if epoch % REPORT_EVERY == 0:
                _report(trial, evals_log[data][metric][-1], epoch)
            return False
    return Pruning()


def lightgbm_pruning(trial, metric: str, data: str = "val"):
    """A LightGBM callback reporting the validation ``metric`` to ``trial``."""
    def callback(env) -> None:
        if env.iteration % REPORT_EVERY:
            return
        for name, eval_name, value, _ in env.evaluation_result_list:
            if (name, eval_name) == (data, metric):
                _report(trial, value, env.iteration)
    return callback
