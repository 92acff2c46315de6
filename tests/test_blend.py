"""The blend notebook on two kernels' outputs written here as kk.folds and kk.submission write
them; kk.blend's refusals of sources that cannot be blended."""
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score
from sklearn.model_selection import StratifiedKFold

import kagglekit as kk
from kagglekit.tools.notebook_runner import run_notebook

REPO = Path(__file__).resolve().parents[1]
DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto", "data_dir": ""}


def _binary_kernel(out: Path, name: str, logits: np.ndarray, y: np.ndarray, test_logits: np.ndarray):
    """A GNN-like kernel's output on a binary label: OOF logits by StratifiedKFold (kk.folds),
    submission.csv with node, predicted (0/1) and probability, metrics.json naming the model."""
    os.environ["KAGGLEKIT_OUTPUT"] = str(out)
    try:
        run = kk.start(dict(DECLARED), name, declared=dict(DECLARED), verbose=False)
        cv = kk.folds.CrossValidation(run, "gnn", StratifiedKFold(4, shuffle=True, random_state=0),
                                      n=len(y), y=y, ids=np.arange(len(y)))
        cv.run(lambda f: kk.folds.Predictions(oof={name: logits[f.val]}, test={name: test_logits}),
               target=y, test_ids=np.arange(len(test_logits)))
        probability = 1 / (1 + np.exp(-test_logits))
        frame = pd.DataFrame({"node": 1000 + np.arange(len(test_logits)),
                              "predicted": (probability >= 0.5).astype(int), "probability": probability})
        kk.submission.write(frame, out / "submission.csv", kk.submission.declared(frame, ["node"]))
        run.log(submission={"model": name, "id_columns": ["node"], "oof_scale": "logit"})
    finally:
        os.environ.pop("KAGGLEKIT_OUTPUT", None)


@pytest.fixture
def two_kernels(tmp_path):
    """Two models of one binary label, each right where the other is noisy: the first sees the
    label through feature a, the second through feature b, each blurred by its own noise."""
    rng = np.random.default_rng(3)
    y = (rng.random(800) < 0.2).astype(int)
    signal = 2.0 * y - 1.0
    first = signal + rng.normal(scale=1.6, size=800)
    second = signal + rng.normal(scale=1.6, size=800)
    test = rng.normal(size=(2, 50))
    _binary_kernel(tmp_path / "gnn-a", "gnn_a", first, y, test[0])
    _binary_kernel(tmp_path / "gnn-b", "gnn_b", second, y, test[1])
    return tmp_path, y, first, second


@pytest.mark.slow
@pytest.mark.e2e
def test_the_blend_of_two_kernels_scores_at_least_the_best_one_on_oof_and_writes_a_checked_file(two_kernels):
    root, y, first, second = two_kernels
    out = run_notebook(REPO / "notebooks" / "blend.ipynb",
                       {"sources": f"{root / 'gnn-a'},{root / 'gnn-b'}"}, output_dir=root / "blend", progress=False)
    m = json.loads((out / "metrics.json").read_text())["blend"]
    singles = {"gnn-a": average_precision_score(y, first), "gnn-b": average_precision_score(y, second)}
    assert m["metric"] == "pr_auc" and m["oof_scores"]["gnn-a"] == pytest.approx(singles["gnn-a"])
    assert m["oof_scores"][m["chosen"]] >= max(singles.values())
    assert m["chosen"] == "NNLS blend" and m["oof_scores"]["NNLS blend"] > max(singles.values()) + 0.02
    assert set(m["weights"]) == {"gnn-a", "gnn-b"} and sum(m["weights"].values()) == pytest.approx(1)
    assert all(0.2 < w < 0.8 for w in m["weights"].values())  # equally good: both weigh
    sub = pd.read_csv(out / "submission.csv")
    a, b = (pd.read_csv(root / k / "submission.csv") for k in ("gnn-a", "gnn-b"))
    assert list(sub.columns) == ["node", "predicted", "probability"] and list(sub["node"]) == list(a["node"])
    w = m["weights"]
    assert np.allclose(sub["probability"], w["gnn-a"] * a["probability"] + w["gnn-b"] * b["probability"])
    assert set(sub["predicted"]) <= {0, 1}


def test_sources_that_predicted_another_target_are_refused_naming_the_row(two_kernels):
    root, *_ = two_kernels
    oof = pd.read_parquet(root / "gnn-b" / "oof.parquet")
    oof.loc[oof["id"] == "7", "target"] = 1 - oof.loc[oof["id"] == "7", "target"]
    oof.to_parquet(root / "gnn-b" / "oof.parquet", index=False)
    sources = [kk.blend.read_source(str(root / k)) for k in ("gnn-a", "gnn-b")]
    with pytest.raises(kk.blend.BlendError, match="disagree on the target of id '7'"):
        kk.blend.align(sources)


def test_a_kernel_without_folds_is_refused_with_the_fix(tmp_path):
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "submission.csv").write_text("id,target\n1,0.5\n")
    with pytest.raises(kk.blend.BlendError, match=r"no oof.parquet, metrics.json: run that notebook with folds >= 2"):
        kk.blend.read_source(str(tmp_path / "k"))
    with pytest.raises(kk.blend.BlendError, match="kernel_sources"):
        kk.blend.read_source("someone/not-attached", roots=[tmp_path])


def test_a_run_folder_whose_name_holds_commas_is_one_source(tmp_path, monkeypatch):
    """make run names a run's folder by its parameters, joined by commas: copied from the CLI's output into
    sources, it was cut at its commas (issue 84)."""
    from kagglekit.submit import blend
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "tabular" / "folds=3,seed=1"
    run.mkdir(parents=True)
    (tmp_path / "runs" / "tabular" / "folds=3").mkdir()  # a shorter folder that also exists: the longer wins
    other = tmp_path / "runs" / "text"
    other.mkdir()
    assert blend.split_sources(f"{run}, {other}") == [str(run), str(other)]
    assert blend.split_sources("runs/tabular/folds=3,seed=1,runs/text") == ["runs/tabular/folds=3,seed=1", "runs/text"]
    assert blend.split_sources("someone/kernel-a,someone/kernel-b,") == ["someone/kernel-a", "someone/kernel-b"]
    from kagglekit.run import paths  # the check before any work reads them the same way
    paths.check('sources = ""  # kernels\n', {"sources": f"{run},{other}"}, roots=[])
    with pytest.raises(paths.PathError, match=r"sources='seed=2' does not exist"):  # the piece no folder holds
        paths.check('sources = ""  # kernels\n', {"sources": f"{run.parent / 'folds=3,seed=2'},{other}"}, roots=[])
