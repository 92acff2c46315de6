"""The GNN notebook: built-in graph, the real Cora files, Elliptic-layout files, force_retrain."""
import json
from pathlib import Path

import pandas as pd
import pytest
from test_graph import write_elliptic
from test_notebooks import _outputs, _text, assert_reads_as_a_report

from kagglekit.tools.notebook_runner import run_notebook

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "gnn_node_classification.ipynb"
CORA = REPO.parent / "shared" / "data" / "planetoid" / "Cora"


def run(params: dict, out: Path) -> dict:
    folder = run_notebook(NOTEBOOK, params, output_dir=out, progress=False)
    return json.loads((folder / "metrics.json").read_text())


def model_row(metrics: dict, name: str) -> dict:
    return next(r for r in metrics["models"] if r["model"] == name)


@pytest.mark.slow
@pytest.mark.e2e
def test_gnn_beats_the_baselines_on_the_builtin_graph_and_force_retrain_retrains_everything(tmp_path):
    out = tmp_path / "gnn"
    first = run({"smoke": True}, out)
    gnn, mlp = model_row(first, "GNN (gcn)"), model_row(first, "MLP (features only)")
    assert gnn["test_pr_auc"] > mlp["test_pr_auc"] + 0.1  # the structure carries the signal
    assert first["best"].startswith(("GNN", "trees (features + GNN"))  # picked on validation
    assert first["search_gnn"]["trials"] == {"COMPLETE": 2} and first["fit"]["oom_count"] == 0
    assert first["fit"]["steps"] == first["fit"]["steps_this_session"] == 30  # steps, not epochs
    assert first["chain"] == {"cache:pretrain": "computed", "pretrain": "trained", "fit": "trained",
                              "cache:gnn-fold0": "computed", "cache:trees-fold0-seed0": "computed",
                              "cache:trees_gnn-fold0-seed0": "computed"}
    assert first["folds"] == 1 and first["gnn"]["per_seed"] == [gnn["test_pr_auc"]]  # repeats=1
    for png in ("pr_curve.png", "fit_learning_curves.png", "pretrain_learning_curves.png"):
        assert (out / png).exists()
    assert_reads_as_a_report(out, "gnn_node_classification")
    trials = [line for _, o in _outputs(out / "gnn_node_classification.ipynb")
              for line in _text(o).splitlines() if line.startswith("kagglekit tune: trial")]
    assert len(trials) == 2  # one line per search trial, no progress bars of its fits
    saved = {p: p.stat().st_mtime_ns for p in (out / "checkpoints").rglob("step-*")}
    again = run({"smoke": True}, out)  # nothing changed: nothing trains
    assert again["chain"] == {"cache:pretrain": "hit", "pretrain": "cached", "cache:gnn-fold0": "hit",
                              "fit": "cached"}
    assert again["models"] == first["models"] and {p: p.stat().st_mtime_ns for p in saved} == saved
    forced = run({"smoke": True, "force_retrain": True}, out)
    assert forced["fit"]["steps_this_session"] == 30 and forced["fit"]["resumed_from"] is None
    assert set(forced["chain"].values()) <= {"computed", "trained"}


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.skipif(not CORA.is_dir(), reason="needs ../shared/data/planetoid beside the repo")
def test_on_the_real_cora_files_the_defaults_reach_the_published_accuracy_and_the_file_agrees(tmp_path):
    out = tmp_path / "cora"
    m = run({"data_dir": str(CORA)}, out)  # nothing else set
    assert len(m["gnn"]["per_seed"]) == 3 and m["config"]["steps"] == 200 and m["fit"]["steps"] == 200
    print("Cora test accuracy per seed:", m["gnn"]["per_seed"])
    assert min(m["gnn"]["per_seed"]) >= 0.79, m["gnn"]  # GCN paper: 81.5 on this split
    assert model_row(m, "MLP (features only)")["test_accuracy"] > 0.50  # the baseline trains
    # submission.csv: a row per test node, and the accuracy computed from the file is the test
    # accuracy the notebook reports for the model that wrote it.
    from torch_geometric.datasets import Planetoid  # noqa: F401  (the labels, read independently)

    from kagglekit.graphs import graphsets
    data = graphsets.load_planetoid(CORA)
    sub = pd.read_csv(out / "submission.csv")
    assert list(sub.columns) == ["node", "predicted"] and len(sub) == 1000
    assert sorted(sub["node"]) == data.test_mask.nonzero().view(-1).tolist()
    truth = data.y[sub["node"].to_numpy()].numpy()
    assert (sub["predicted"].to_numpy() == truth).mean() == model_row(m, m["submission"]["model"])["test_accuracy"]


@pytest.mark.slow
@pytest.mark.e2e
def test_elliptic_the_papers_way_temporal_split_trees_and_trees_on_embeddings(tmp_path):
    """Elliptic in its exact layout: the models learn from steps 1-34 only (pre-training too),
    the trees baseline and the trees on features + GNN embeddings are scored, the illicit class's
    F1, precision and recall are reported, and submission.csv covers the test period and every
    unknown node, with the illicit probability."""
    labels, steps = write_elliptic(tmp_path / "data" / "elliptic_bitcoin_dataset", per_step=30)
    m = run({"smoke": True, "data_dir": str(tmp_path / "data"), "full_batch_nodes": 0,
             "batch_size": 64}, tmp_path / "elliptic")
    assert m["graph"]["learn_max_time_step"] == 34 and not m["graph"]["transductive"]
    assert m["graph"]["learn_nodes"] == sum(1 for s in steps.values() if s <= 34)
    for name in ("trees (features)", "trees (features + GNN embeddings)", "MLP (features only)"):
        row = model_row(m, name)
        assert {"test_f1", "test_precision", "test_recall", "test_pr_auc"} <= set(row)
        assert 0 <= row["test_f1"] <= 1 and 0 < row["test_pr_auc"] <= 1
    assert m["strongest_baseline"] in ("MLP (features only)", "trees (features)")
    assert m["summary"][0]["result"].startswith("test PR-AUC") and "F1" in m["summary"][1]["result"]
    sub = pd.read_csv(tmp_path / "elliptic" / "submission.csv")
    assert list(sub.columns) == ["node", "predicted", "probability"]
    wanted = {t for t, c in labels.items() if c == "unknown" or steps[t] >= 35}
    assert set(sub["node"]) == wanted and sub["probability"].between(0, 1).all()
    transductive = run({"smoke": True, "data_dir": str(tmp_path / "data"), "full_batch_nodes": 0,
                        "batch_size": 64, "transductive": True}, tmp_path / "elliptic-all")
    assert transductive["graph"]["learn_max_time_step"] == 49 and transductive["graph"]["transductive"]
