"""LightGBM, XGBoost and CatBoost trained the same way on one fold of a tabular competition.

Each library reads the table as it is: pandas categoricals natively (LightGBM's and XGBoost's
own categorical splits, CatBoost's ordered target statistics), numeric gaps as gaps (each
learns where they go). Early stopping on the fold's validation rows; predictions in the kit's
form (``run.scoring``: a value, the probability of class 1, or a probability per class).

The device: XGBoost and CatBoost on CUDA where this process sees a real GPU, LightGBM on its
OpenCL GPU where the build reaches one (``search.boosting.lightgbm_device``). Under the T4 x2
emulation the decision is the GPU's (recorded as such) and the trees grow on the CPU. Threads:
``threads`` (the pool gives each process its share of the cores, so two processes do not spin
on the same ones).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..machine import emulate, gpus
from ..search import boosting

LIBRARIES = ("lightgbm", "xgboost", "catboost")
OBJECTIVES = {  # task -> (LightGBM, XGBoost, CatBoost)
    "regression": ("regression", "reg:squarederror", "RMSE"),
    "binary": ("binary", "binary:logistic", "Logloss"),
    "multiclass": ("multiclass", "multi:softprob", "MultiClass"),
}
EVAL = {"regression": ("l2", "rmse"), "binary": ("binary_logloss", "logloss"),
        "multiclass": ("multi_logloss", "mlogloss")}


@dataclass
class Trees:
    val: np.ndarray  # predictions of the validation rows
    test: np.ndarray
    importance: dict  # feature -> share of the total gain
    rounds: int  # the best iteration's number of trees
    device: str  # where the trees grew (or were decided to: "cuda (emulated)")


def device(library: str) -> tuple[str, bool]:
    """(the device ``library`` is given, whether it really runs there)."""
    real = bool(gpus.inventory()) and emulate.machine() is None
    if library == "lightgbm":
        return boosting.lightgbm_device()[0], True
    chosen = "cuda" if gpus.inventory() else "cpu"
    return chosen, chosen == "cpu" or real


def train(library: str, params: dict, task: str, data: dict, *, rounds: int, classes: int = 0,
          early_stop: int = 100, threads: int = 0, seed: int = 0, hook=None) -> Trees:
    """``library`` with ``params`` (its own names) on ``data``: x_train, y_train, x_val, y_val,
    x_test (DataFrames / arrays). ``hook``: a pruning callback (LightGBM, XGBoost)."""
    if library not in LIBRARIES:
        raise ValueError(f"unknown library {library!r}: one of {', '.join(LIBRARIES)}")
    chosen, real = device(library)
    fit = {"lightgbm": _lightgbm, "xgboost": _xgboost, "catboost": _catboost}[library]
    trees = fit(params, task, data, rounds, classes, early_stop, threads, seed, chosen if real else "cpu", hook)
    trees.device = chosen if real else f"{chosen} (emulated: ran on the CPU)"
    return trees


def _shares(gains: dict, columns) -> dict:
    total = float(sum(gains.values())) or 1.0
    return {str(c): float(gains.get(str(c), 0.0)) / total for c in columns}


def _lightgbm(params, task, data, rounds, classes, early_stop, threads, seed, where, hook) -> Trees:
    import lightgbm as lgb
    settings = {"objective": OBJECTIVES[task][0], "metric": EVAL[task][0], "verbose": -1, "seed": seed,
                "num_threads": threads, "device_type": where, **params}
    if task == "multiclass":
        settings["num_class"] = classes
    train_set = lgb.Dataset(data["x_train"], data["y_train"])
    val_set = lgb.Dataset(data["x_val"], data["y_val"], reference=train_set)
    booster = lgb.train(settings, train_set, rounds, valid_sets=[val_set], valid_names=["val"],
                        callbacks=[lgb.early_stopping(early_stop, verbose=False)] + ([hook] if hook else []))
    best = int(booster.best_iteration or booster.current_iteration())
    gains = dict(zip(booster.feature_name(), booster.feature_importance("gain")))
    return Trees(np.asarray(booster.predict(data["x_val"], num_iteration=best)),
                 np.asarray(booster.predict(data["x_test"], num_iteration=best)),
                 _shares(gains, data["x_train"].columns), best, where)


def _xgboost(params, task, data, rounds, classes, early_stop, threads, seed, where, hook) -> Trees:
    import xgboost as xgb
    settings = {"objective": OBJECTIVES[task][1], "eval_metric": EVAL[task][1], "tree_method": "hist",
                "device": where, "seed": seed, "nthread": threads or None, **params}
    if task == "multiclass":
        settings["num_class"] = classes
    train_set = xgb.DMatrix(data["x_train"], data["y_train"], enable_categorical=True, nthread=threads or -1)
    val_set = xgb.DMatrix(data["x_val"], data["y_val"], enable_categorical=True, nthread=threads or -1)
    booster = xgb.train({k: v for k, v in settings.items() if v is not None}, train_set, rounds,
                        evals=[(val_set, "val")], early_stopping_rounds=early_stop, verbose_eval=False,
                        callbacks=[hook] if hook else None)
    best = int(booster.best_iteration) + 1

    def predict(x):
        return booster.predict(xgb.DMatrix(x, enable_categorical=True), iteration_range=(0, best))
    gains = booster.get_score(importance_type="total_gain")
    return Trees(predict(data["x_val"]), predict(data["x_test"]), _shares(gains, data["x_train"].columns),
                 best, where)


def _catboost(params, task, data, rounds, classes, early_stop, threads, seed, where, hook) -> Trees:
    from catboost import CatBoost, Pool
    categorical = [c for c in data["x_train"].columns if str(data["x_train"][c].dtype) == "category"]

    def pool(x, y=None):  # CatBoost's categories are strings; a gap is a category of its own
        x = x.copy()
        for c in categorical:
            x[c] = x[c].astype("object").where(x[c].notna(), "NaN").astype(str)
        return Pool(x, y, cat_features=categorical)
    settings = {"loss_function": OBJECTIVES[task][2], "iterations": rounds, "random_seed": seed,
                "thread_count": threads or -1, "task_type": "GPU" if where == "cuda" else "CPU",
                "verbose": False, "allow_writing_files": False, "od_type": "Iter", "od_wait": early_stop,
                **params}
    model = CatBoost(settings)
    model.fit(pool(data["x_train"], data["y_train"]), eval_set=pool(data["x_val"], data["y_val"]),
              use_best_model=True)
    kind = "RawFormulaVal" if task == "regression" else "Probability"

    def predict(x):
        out = model.predict(pool(x), prediction_type=kind)
        return out[:, 1] if task == "binary" else out
    gains = dict(zip(map(str, data["x_train"].columns), model.get_feature_importance()))
    return Trees(predict(data["x_val"]), predict(data["x_test"]), _shares(gains, data["x_train"].columns),
                 int(model.get_best_iteration() or rounds) + 1, where)
