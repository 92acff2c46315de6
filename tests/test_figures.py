"""The write-ups' figures: gpu_figures on CPU (two gloo processes), the borrowed model cells,
the judging against targets, and the table appended to RESULTS.md once per kernel version."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_notebooks import assert_reads_as_a_report

from kagglekit.studies import figures
from kagglekit.tools import borrow, figuretable
from kagglekit.tools.notebook_runner import run_notebook

REPO = Path(__file__).resolve().parents[1]
FIGURES = {"scaling", "grad_sync_share", "amp_speedup", "amp_memory", "amp_accuracy"}


def test_gpu_figures_on_cpu_fills_every_row_and_judges_no_target_a_pass(tmp_path):
    out = run_notebook(REPO / "notebooks" / "gpu_figures.ipynb", {"smoke": True},
                       output_dir=tmp_path / "figures", progress=False)
    m = json.loads((out / "metrics.json").read_text())
    assert m["provenance"]["device"].startswith("CPU (") and m["provenance"]["torch"].startswith("2.13")
    assert m["provenance"]["driver"] == "none (no GPU)" and m["provenance"]["date"]
    scaled = m["measurements"]["scaling"]  # the same global batch on 1 process, then split over 2
    assert [(r["processes"], r["batch_per_process"]) for r in scaled] == [(1, 8), (2, 4), (1, 128), (2, 64)]
    assert all(r["samples_per_s"] > 0 and r["peak_memory_mb"] is not None for r in scaled)
    precisions = m["measurements"]["precision"]  # one process at the per-GPU batch, fp32 then CPU autocast
    assert [(r["precision"], r["batch_per_process"]) for r in precisions] == [("fp32", 4), ("bf16", 4),
                                                                              ("fp32", 64), ("bf16", 64)]
    by_workload = {}
    for f in m["figures"]:
        by_workload.setdefault(f["workload"], set()).add(f["figure"])
        if f["figure"] != "gpu_util":  # every figure measured, even where it cannot be judged
            assert f["value"] is not None, f
        if f["target"]:  # each target judged, and on a CPU never passed
            assert f["verdict"].startswith("not measurable here (needs "), f
        else:
            assert f["verdict"] == "reported"
    assert sorted(by_workload.values(), key=len) == [{"gpu_util"}, FIGURES, FIGURES]
    # scaling, AMP memory and AMP accuracy of each workload, and utilisation: said, never passed
    assert len(m["summary"]) == 7 and all(s["passed"] is None and "not measurable here" in s["result"]
                                          for s in m["summary"])
    executed = (out / "gpu_figures.ipynb").read_text()
    assert "class UNet3D(nn.Module)" in executed and "def surface_loss" in executed  # the borrowed cells
    assert_reads_as_a_report(out, "gpu_figures")


def _notebook(cells: list[dict]) -> dict:
    return {"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": cells}


def _cell(source: str, tags=(), **meta) -> dict:
    return {"cell_type": "code", "metadata": {"tags": list(tags), **meta}, "source": source, "outputs": [],
            "execution_count": None}


def test_a_borrowing_notebook_measures_the_pipelines_model_as_edited_at_its_kaggle_parameters(tmp_path):
    notebooks, meta = tmp_path / "notebooks", tmp_path / "kernel-metadata"
    notebooks.mkdir(), meta.mkdir()
    pipeline = _notebook([_cell("width = 8  # channels\ndepth = 2", ["parameters"]),
                          _cell("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                                "        self.layer = nn.Linear(width, 3)  # edited by the user", ["model"]),
                          _cell("raise RuntimeError('a training cell: never borrowed')")])
    (notebooks / "pipe.ipynb").write_text(json.dumps(pipeline))
    (meta / "pipe.json").write_text(json.dumps({"parameters": {"width": 64}}))
    measuring = _notebook([_cell("BORROWED = {}", ["borrowed"], borrow=["pipe"])])
    (notebooks / "measure.ipynb").write_text(json.dumps(measuring))
    filled = json.loads(borrow.filled_copy(notebooks / "measure.ipynb", tmp_path).read_text())
    space = {}
    exec(filled["cells"][0]["source"], space)  # the literal the kernel reads offline
    kaggle, local = figures.pipeline(space["BORROWED"]["pipe"]), figures.pipeline(space["BORROWED"]["pipe"], False)
    assert kaggle.Net().layer.in_features == 64 and local.Net().layer.in_features == 8 and kaggle.depth == 2
    pipeline["cells"][1]["metadata"]["tags"] = []
    (notebooks / "pipe.ipynb").write_text(json.dumps(pipeline))
    with pytest.raises(borrow.BorrowError, match="pipe.ipynb has no code cell tagged 'model'"):
        borrow.filled_copy(notebooks / "measure.ipynb", tmp_path)


def test_figures_pass_or_fail_against_their_targets_only_on_the_hardware_they_need():
    values = {"scaling": 1.9, "amp_memory": 0.7, "amp_accuracy": 0.001, "amp_speedup": 2.1}
    rows = [{"workload": "w", "figure": figure, "value": value} for figure, value in values.items()]
    targets = figures.targets('{"scaling": 2.0}')
    on_t4x2 = {r["figure"]: r["verdict"] for r in figures.judge(rows, targets, gpus=2)}
    assert on_t4x2 == {"scaling": "FAIL", "amp_memory": "FAIL", "amp_accuracy": "pass", "amp_speedup": "reported"}
    on_one = {r["figure"]: r["verdict"] for r in figures.judge(rows, figures.targets(""), gpus=1)}
    assert on_one["scaling"] == "not measurable here (needs two GPUs)" and on_one["amp_accuracy"] == "pass"
    assert all(r["verdict"].startswith(("not measurable", "reported")) for r in figures.judge(rows, targets, gpus=0))
    # one GPU (make gpu-check on a single card): no second run to scale to, the rest measured
    one_gpu = [{"workload": "w", "run": "1 GPU", "processes": 1, "samples_per_s": 100.0, "grad_sync_share": None}]
    amp = [{"workload": "w", "run": run, "samples_per_s": sps, "peak_memory_mb": mb, "metric": "val_acc",
            "val_acc": acc} for run, sps, mb, acc in (("fp32", 100.0, 1000.0, 0.90), ("mixed", 250.0, 500.0, 0.899))]
    judged = {r["figure"]: r for r in figures.judge(figures.summarise(one_gpu, amp, []), figures.targets(""), gpus=1)}
    assert judged["scaling"]["value"] is None and judged["scaling"]["verdict"].startswith("not measurable here")
    assert (judged["amp_memory"]["value"], judged["amp_memory"]["verdict"]) == (0.5, "pass")
    assert judged["amp_speedup"]["value"] == 2.5 and judged["amp_accuracy"]["value"] == pytest.approx(0.0011, abs=1e-4)
    with pytest.raises(ValueError, match=r"criteria names \['scalling'\]"):
        figures.targets('{"scalling": 1.8}')


def _fetched(root: Path, version: int, scaling: float) -> None:
    folder = root / "kagglekit-gpu-figures" / f"v{version}"
    folder.mkdir(parents=True)
    (folder / "kaggle.json").write_text(json.dumps({"version": version, "status": "COMPLETE"}))
    (folder / "metrics.json").write_text(json.dumps({
        "provenance": {"device": "2 x Tesla T4", "driver": "550.90.07", "torch": "2.6.0+cu124", "cuda": "12.4",
                       "date": "2026-11-20"},
        "figures": [{"workload": "U-Net 16x3, patch 96 (segmentation_3d)", "figure": "scaling", "value": scaling,
                     "target": ">= 1.8", "verdict": "pass" if scaling >= 1.8 else "FAIL"}]}))


def _results(root: Path, results: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "results", "gpu_figures", "--output",
                           str(root), "--results", str(results)], cwd=REPO, capture_output=True, text=True)


def test_make_results_appends_each_fetched_version_once_with_its_provenance(tmp_path):
    root, results = tmp_path / "kaggle", tmp_path / "RESULTS.md"
    results.write_text("# Results\n")
    missing = _results(root, results)
    assert missing.returncode == 2 and "make output NB=gpu_figures" in missing.stderr
    _fetched(root, 3, 1.87)
    first = _results(root, results)
    assert first.returncode == 0 and "appended Kaggle kernel kagglekit-gpu-figures version 3" in first.stdout
    text = results.read_text()
    assert "### gpu_figures on 2 x Tesla T4, 2026-11-20" in text and "Driver 550.90.07, torch 2.6.0+cu124" in text
    assert "| U-Net 16x3, patch 96 (segmentation_3d) | scaling | 1.87 | >= 1.8 | pass |" in text
    again = _results(root, results)
    assert results.read_text() == text and "already there, unchanged" in again.stdout
    _fetched(root, 4, 1.52)  # a later version appended after it, the first left as it was
    _results(root, results)
    assert results.read_text().startswith(text) and "| 1.52 | >= 1.8 | FAIL |" in results.read_text()
    fourth = figuretable.marker("Kaggle kernel kagglekit-gpu-figures version 4 (COMPLETE)")
    assert results.read_text().count(fourth) == 1
