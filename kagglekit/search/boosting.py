"""Gradient-boosted trees on the GPU when there is one, and pruned by Optuna.

XGBoost trains on CUDA wherever this process sees a GPU (a search worker's own card, the
notebook's first card). LightGBM's pip and Kaggle builds use OpenCL (its ``device_type="gpu"``),
which a machine may lack even with a GPU: ``lightgbm_device`` finds out once, in a short-lived
process of its own, and says which it uses. Either library opens the GPU driver where it
trains, and a driver opened in the notebook's process breaks every later fork-based
``launch``: train them through ``kk.launcher.isolated`` (or inside a launched rank or a search
worker). The pruning callbacks report the validation metric to an Optuna trial while the trees
grow and stop a poor trial early; ``predict`` reads either library's booster the same way.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..machine import gpus

REPORT_EVERY = 10  # boosting rounds between reports (each is a write to the study)
PROBE_TIMEOUT_S = 300
# Trains one tree on the GPU and prints the answer; run by a fresh interpreter, never here.
_LIGHTGBM_PROBE = """
import json, numpy as np, lightgbm
x = np.random.default_rng(0).random((64, 2))
try:
    lightgbm.train({"device_type": "gpu", "verbose": -1}, lightgbm.Dataset(x, x[:, 0]), 1)
    print(json.dumps(["gpu", "OpenCL GPU"]))
except lightgbm.basic.LightGBMError as err:
    print(json.dumps(["cpu", f"this LightGBM build has no usable GPU ({str(err).splitlines()[0]})"]))
"""


def xgboost_device() -> str:
    """"cuda" where this process sees a GPU, else "cpu"."""
    return "cuda" if gpus.inventory() else "cpu"


def lightgbm_device() -> tuple[str, str]:
    """("gpu" or "cpu", why): the GPU when one is here and this LightGBM build reaches it.

    Found by training one tree in a process of its own (LightGBM's OpenCL would open the
    driver in this one), once per LightGBM version and set of GPUs: the answer is kept in
    the temporary folder for every later run on this machine."""
    found = gpus.inventory()
    if not found:
        return "cpu", "no GPU"
    import lightgbm
    return _probe_lightgbm(lightgbm.__version__, tuple(g.uuid for g in found))


def describe(libraries=("xgboost", "lightgbm")) -> str:
    """Where each of ``libraries``' trees grow here, in one line for a notebook to print."""
    where = {"xgboost": lambda: f"XGBoost on {xgboost_device()}",
             "lightgbm": lambda: "LightGBM on {} ({})".format(*lightgbm_device())}
    return ", ".join(where[library]() for library in libraries)


@functools.cache
def _probe_lightgbm(version: str, gpu_ids: tuple) -> tuple[str, str]:
    key = hashlib.sha256(json.dumps([version, gpu_ids, sys.executable]).encode()).hexdigest()[:16]
    answer = Path(tempfile.gettempdir()) / "kagglekit-probes" / f"lightgbm-{key}.json"
    try:
        return tuple(json.loads(answer.read_text()))
    except (OSError, ValueError):
        pass
    found, ran = _run_probe(_LIGHTGBM_PROBE)
    if ran:  # a probe that could not run (a crash, a timeout) is asked again next time
        from ..state import atomic
        atomic.write_json(answer, list(found))
    return found


def _run_probe(code: str) -> tuple[tuple[str, str], bool]:
    """(``code``'s answer, True) from a fresh interpreter that sees this one's modules; or
    ("cpu", what went wrong), False."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        return ("cpu", f"the GPU probe could not run ({type(err).__name__})"), False
    try:
        return tuple(json.loads(done.stdout.strip().splitlines()[-1])), True
    except (ValueError, IndexError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return ("cpu", f"the GPU probe failed ({last})"), False


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


def predict(booster, x, *, raw: bool = False):
    """An XGBoost or LightGBM booster's prediction of ``x`` from the trees early stopping kept
    (every tree without early stopping). XGBoost predicts on the host: a booster that trained on
    CUDA is moved to the CPU first, since ``x`` is in host memory (predicting on the card would copy
    it there and warn of mismatched devices). ``raw``: margins (logits), not probabilities."""
    if type(booster).__module__.startswith("xgboost"):
        import xgboost
        booster.set_param({"device": "cpu"})
        rounds = int(booster.attr("best_iteration") or booster.num_boosted_rounds() - 1) + 1
        return booster.predict(xgboost.DMatrix(x, enable_categorical=True), iteration_range=(0, rounds),
                               output_margin=raw)
    return booster.predict(x, raw_score=raw)  # LightGBM's own default: its best iteration when it has one
