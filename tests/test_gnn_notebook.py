"""The GNN notebook: built-in graph, the real Cora files, Elliptic-layout files, force_retrain."""
import json
from pathlib import Path

import pytest

from kagglekit.tools.notebook_runner import run_notebook
from test_graph import write_elliptic
from test_notebooks import _outputs, _text, assert_reads_as_a_report

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "gnn_node_classification.ipynb"
CORA = REPO.parent / "shared" / "data" / "planetoid" / "Cora"


def run(params: dict, out: Path) -> dict:
    folder = run_notebook(NOTEBOOK, params, output_dir=out, progress=False)
    return json.loads((folder / "metrics.json").read_text())


@pytest.mark.slow
def test_gnn_beats_the_mlp_on_the_builtin_graph_and_force_retrain_retrains_everything(tmp_path):
    out = tmp_path / "gnn"
    first = run({"smoke": True}, out)
    assert first["gnn"]["mean"] > first["mlp"]["mean"] + 0.1  # the structure carries the signal
    assert first["search"]["trials"] == {"COMPLETE": 2} and first["fit"]["oom_count"] == 0
    assert first["fit"]["steps"] == first["fit"]["steps_this_session"] == 30  # steps, not epochs
    assert first["chain"] == {"cache:pretrain": "computed", "pretrain": "trained", "fit": "trained"}
    for png in ("pr_curve.png", "learning_curves.png"):
        assert (out / png).exists()
    assert_reads_as_a_report(out, "gnn_node_classification")
    trials = [line for _, o in _outputs(out / "gnn_node_classification.ipynb")
              for line in _text(o).splitlines() if line.startswith("kagglekit tune: trial")]
    assert len(trials) == 2  # one line per search trial, no progress bars of its fits
    again = run({"smoke": True}, out)  # nothing changed: nothing trains
    assert again["fit"]["steps_this_session"] == 0 and again["chain"]["cache:pretrain"] == "hit"
    forced = run({"smoke": True, "force_retrain": True}, out)
    assert forced["fit"]["steps_this_session"] == 30 and forced["fit"]["resumed_from"] is None
    assert forced["chain"] == {"cache:pretrain": "computed", "pretrain": "trained", "fit": "trained"}


@pytest.mark.slow
@pytest.mark.skipif(not CORA.is_dir(), reason="needs ../shared/data/planetoid beside the repo")
def test_on_the_real_cora_files_the_defaults_reach_the_published_accuracy(tmp_path):
    m = run({"data_dir": str(CORA)}, tmp_path / "cora")  # nothing else set
    assert len(m["gnn"]["per_seed"]) == 3
    assert m["gnn"]["mean"] >= 0.79, m["gnn"]  # GCN paper: 81.5 on this split
    assert m["mlp"]["mean"] > 0.50, m["mlp"]  # the baseline trains (it trained 0 steps once)
    assert m["steps"] == 200 and m["fit"]["steps"] == 200


@pytest.mark.slow
def test_elliptic_layout_files_train_on_sampled_batches_and_report_pr_auc(tmp_path):
    write_elliptic(tmp_path / "data" / "elliptic_bitcoin_dataset", per_step=60)
    m = run({"smoke": True, "data_dir": str(tmp_path / "data"), "full_batch_nodes": 0,
             "batch_size": 64}, tmp_path / "elliptic")
    assert {"pr_auc", "f1", "roc_auc"} <= set(m["test"][0]) and m["test"][1]["model"].startswith("MLP")
    assert 0 < m["gnn"]["mean"] <= 1 and 0 < m["mlp"]["mean"] <= 1
    assert m["summary"][0]["result"].startswith("test PR-AUC")
