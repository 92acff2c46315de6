"""The tabular notebook's LightGBM against a plain ``lightgbm.train`` on the same folds.

A Playground-sized table (numeric columns with gaps, two categorical columns, a binary target),
5 stratified folds, the notebook's default LightGBM parameters, early stopping on each fold's
validation rows. Three ways, timed in the same run and scored alike (ROC AUC, mean over folds):

- plain: ``lightgbm.train`` fold after fold in this process, LightGBM's own thread count;
- kit, in place: ``kk.gbdt.train`` fold after fold, every core;
- kit, shared: the folds as units over two of ``kk.workpool``'s processes, half the cores each
  (what the notebook does on T4 x2, one process per GPU; without a GPU it runs in place).

Goal: the same CV score to 1e-9 (the kit adds no work to the trees), in place no slower than
plain. The shared row says what two processes cost or gain on this machine's cores.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

PARAMS = {"num_leaves": 31, "learning_rate": 0.05, "min_child_samples": 20, "feature_fraction": 0.8,
          "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0}


def table(rows: int, seed: int = 0):
    import pandas as pd
    rng = np.random.default_rng(seed)
    x = pd.DataFrame(rng.normal(size=(rows, 16)), columns=[f"f{i}" for i in range(16)])
    x.loc[rng.random(rows) < 0.05, "f3"] = np.nan  # gaps, kept as gaps
    x["colour"] = pd.Categorical(rng.choice(["red", "green", "blue", "grey"], rows))
    x["city"] = pd.Categorical(rng.choice([f"c{i}" for i in range(40)], rows))
    logit = x["f0"] - 0.7 * x["f1"] * x["f2"] + 0.5 * (x["colour"] == "red") + np.sin(3 * x["f4"])
    y = (logit + rng.normal(size=rows) > 0.3).to_numpy(np.int64)
    return x, y


def folds_of(y, k: int = 5, seed: int = 0):
    from sklearn.model_selection import StratifiedKFold
    return list(StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros((len(y), 1)), y))


def plain(x, y, folds, rounds: int) -> list[float]:
    import lightgbm as lgb
    from sklearn.metrics import roc_auc_score
    scores = []
    for tr, va in folds:
        params = {"objective": "binary", "metric": "binary_logloss", "verbose": -1, "seed": 0, **PARAMS}
        booster = lgb.train(params, lgb.Dataset(x.iloc[tr], y[tr]), rounds, valid_sets=[lgb.Dataset(x.iloc[va], y[va])],
                            callbacks=[lgb.early_stopping(100, verbose=False)])
        scores.append(roc_auc_score(y[va], booster.predict(x.iloc[va], num_iteration=booster.best_iteration)))
    return scores


def kit_fold(x, y, tr, va, rounds: int, threads: int) -> float:
    from sklearn.metrics import roc_auc_score

    import kagglekit as kk
    data = {"x_train": x.iloc[tr], "y_train": y[tr], "x_val": x.iloc[va], "y_val": y[va], "x_test": x.iloc[:10]}
    trees = kk.gbdt.train("lightgbm", PARAMS, "binary", data, rounds=rounds, threads=threads, seed=0)
    return float(roc_auc_score(y[va], trees.val))


def shared(x, y, folds, rounds: int, out: str) -> list[float]:
    import torch

    import kagglekit as kk
    os.environ["KAGGLEKIT_OUTPUT"] = out
    declared = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "data_dir": ""}
    run = kk.start(dict(declared), "bench", declared=dict(declared), verbose=False)

    def job(tr, va):
        return lambda threads: {"auc": torch.tensor(kit_fold(x, y, tr, va, rounds, threads))}
    jobs = [(run.unit(f"lgb{k}", config={"k": k}), job(tr, va)) for k, (tr, va) in enumerate(folds)]
    done = kk.workpool.share(run, jobs, workers=2)
    return [float(done[f"lgb{k}"]["auc"]) for k in range(len(folds))]


def main() -> None:
    from kagglekit.machine import env
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2000)
    args = ap.parse_args()
    x, y = table(args.rows)
    folds = folds_of(y)
    timed = {}
    for label, fn in (("plain", lambda: plain(x, y, folds, args.rounds)),
                      ("kit, in place", lambda: [kit_fold(x, y, tr, va, args.rounds, env.real_cpus())
                                                 for tr, va in folds]),
                      ("kit, shared", lambda: shared(x, y, folds, args.rounds, tempfile.mkdtemp()))):
        started = time.perf_counter()
        scores = fn()
        timed[label] = (time.perf_counter() - started, float(np.mean(scores)))
    base_s, base_auc = timed["plain"]
    print(f"{args.rows:,} rows, 5 folds, {env.real_cpus()} cores")
    for label, (seconds, auc) in timed.items():
        print(f"  {label:14} {seconds:7.1f} s  CV AUC {auc:.6f}  time / plain {seconds / base_s:.2f}  "
              f"AUC - plain {auc - base_auc:+.1e}")


if __name__ == "__main__":
    main()
