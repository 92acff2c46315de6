"""The tabular notebook on two real data sets, beside plain references on the same folds.

scikit-learn's own copies of two public data sets, written as a tabular competition ships them
(``train.csv`` with an id and the target, ``test.csv`` without it, ``sample_submission.csv``),
a fifth of the rows held out as the hidden test set (its labels in ``solution.csv`` beside the
competition's folder, never inside it):

- Breast Cancer Wisconsin (Diagnostic), 569 tumours, 30 measurements (column names with spaces,
  as scikit-learn names them); target ``malignant`` (0/1), scored by ROC AUC;
- Diabetes (Efron et al. 2004), 442 patients, 10 raw measurements (``sex`` coded 1/2); target
  ``progression`` one year on (25 to 346), scored by RMSE.

For each: the notebook's per-model CV, its submitted ensemble's CV and its score on the held-out
rows; beside it, on the same stratified / plain 5 folds (same seed): a plain ``lightgbm.train``
with the notebook's default LightGBM parameters, and a plain scikit-learn logistic / ridge
regression on standardised features.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "tabular.ipynb"
SETS = {"breast_cancer": ("malignant", "auc"), "diabetes": ("progression", "rmse")}


def write(name: str, root: Path, seed: int = 0) -> tuple[Path, Path]:
    """(the competition's folder, the hidden test labels' file) of data set ``name``."""
    import pandas as pd
    from sklearn import datasets
    from sklearn.model_selection import train_test_split
    target, _ = SETS[name]
    if name == "breast_cancer":
        raw = datasets.load_breast_cancer(as_frame=True)
        frame = raw.data.assign(**{target: 1 - raw.target})  # scikit-learn's 0 is malignant
    else:
        raw = datasets.load_diabetes(as_frame=True, scaled=False)
        frame = raw.data.assign(**{target: raw.target})
    frame.insert(0, "id", np.arange(len(frame)))
    train, test = train_test_split(frame, test_size=0.2, random_state=seed,
                                   stratify=frame[target] if name == "breast_cancer" else None)
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    train.to_csv(folder / "train.csv", index=False)
    test.drop(columns=target).to_csv(folder / "test.csv", index=False)
    fill = 0.5 if name == "breast_cancer" else float(train[target].mean())
    pd.DataFrame({"id": test["id"], target: fill}).to_csv(folder / "sample_submission.csv", index=False)
    solution = root / f"{name}_solution.csv"
    test[["id", target]].to_csv(solution, index=False)
    return folder, solution


def plain_references(folder: Path, target: str, metric: str, folds: int = 5, seed: int = 0) -> dict:
    """CV of a plain lightgbm.train and a plain linear model on the notebook's folds."""
    import lightgbm as lgb
    import pandas as pd
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.metrics import mean_squared_error, roc_auc_score
    from sklearn.model_selection import KFold, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    train = pd.read_csv(folder / "train.csv")
    x, y = train.drop(columns=["id", target]), train[target].to_numpy()
    splitter = (StratifiedKFold if metric == "auc" else KFold)(folds, shuffle=True, random_state=seed)
    score = (lambda t, p: roc_auc_score(t, p)) if metric == "auc" else (lambda t, p: mean_squared_error(t, p) ** 0.5)
    params = {"objective": "binary" if metric == "auc" else "regression", "num_leaves": 31, "learning_rate": 0.05,
              "min_child_samples": 20, "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1,
              "lambda_l2": 1.0, "verbose": -1, "seed": seed}
    out = {"lightgbm (plain)": [], "linear (plain)": []}
    for tr, va in splitter.split(x, y):
        booster = lgb.train(params, lgb.Dataset(x.iloc[tr], y[tr]), 2000, valid_sets=[lgb.Dataset(x.iloc[va], y[va])],
                            callbacks=[lgb.early_stopping(100, verbose=False)])
        out["lightgbm (plain)"].append(score(y[va], booster.predict(x.iloc[va], num_iteration=booster.best_iteration)))
        linear = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000) if metric == "auc" else Ridge())
        linear.fit(x.iloc[tr], y[tr])
        pred = linear.predict_proba(x.iloc[va])[:, 1] if metric == "auc" else linear.predict(x.iloc[va])
        out["linear (plain)"].append(score(y[va], pred))
    return {name: float(np.mean(v)) for name, v in out.items()}


def held_out(out: Path, solution: Path, target: str, metric: str) -> float:
    import pandas as pd
    from sklearn.metrics import mean_squared_error, roc_auc_score
    truth = pd.read_csv(solution)
    submitted = pd.read_csv(out / "submission.csv").merge(truth, on="id", suffixes=("", "_true"))
    pred, true = submitted[target].to_numpy(), submitted[f"{target}_true"].to_numpy()
    return float(roc_auc_score(true, pred) if metric == "auc" else mean_squared_error(true, pred) ** 0.5)


def main() -> None:
    from kagglekit.tools.notebook_runner import run_notebook
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets.split(","):
            target, metric = SETS[name]
            folder, solution = write(name, Path(tmp) / "data")
            started = time.perf_counter()
            out = run_notebook(NOTEBOOK, {"data_dir": str(folder), "metric": metric}, output_dir=Path(tmp) / name,
                               progress=False)
            seconds = time.perf_counter() - started
            metrics = json.loads((out / "metrics.json").read_text())
            print(f"\n{name} ({metric}; notebook {seconds:.0f} s): submitted {metrics['cv_submitted']}, "
                  f"held-out test {held_out(out, solution, target, metric):.4f}")
            for row in metrics["models"]:
                spread = f" ± {row['std']:.4f}" if "std" in row else ""
                print(f"  {row['model']:16} CV {row['cv']:.4f}{spread}")
            for ref, value in plain_references(folder, target, metric).items():
                print(f"  {ref:16} CV {value:.4f}")


if __name__ == "__main__":
    main()
