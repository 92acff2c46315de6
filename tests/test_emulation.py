"""Kaggle's T4 x2 walked on the CPU (``KAGGLEKIT_EMULATE=t4x2``): a notebook killed mid-fit, its
two ranks, their loader workers and the fp16 scaler included, resumes to the uninterrupted run's
weights bit for bit. (Every notebook's versions and scoring rerun run emulated in
test_sandbox.py.)"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from processes import kill_tree

REPO = Path(__file__).resolve().parents[1]
# The smoke's sizes, with epochs enough to be killed in (a save at every epoch's end: 3 steps)
PARAMS = [arg for p in ("models=lstm", "samples=512", "length=24", "hidden=16", "epochs=40") for arg in ("-p", p)]


def _run(out: Path, wait: bool = True):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KAGGLE")}, "KAGGLEKIT_EMULATE": "t4x2"}
    cmd = [sys.executable, "-m", "kagglekit.tools.cli", "run", "sequence_models", "--output", str(out), *PARAMS]
    if wait:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return None
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _final(out: Path) -> tuple[dict, dict]:
    """The finished run's metrics and its final checkpoint's weights."""
    folder = next((out / "sequence_models").glob("*/metrics.json")).parent
    metrics = json.loads((folder / "metrics.json").read_text())
    final = max((folder / "checkpoints" / "lstm").rglob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    return metrics, torch.load(final, weights_only=True)["model"]


@pytest.mark.slow
def test_a_notebook_killed_mid_fit_under_the_emulated_t4x2_resumes_bitwise(tmp_path):
    _run(tmp_path / "reference")
    reference, weights = _final(tmp_path / "reference")
    fit = reference["fit_lstm"]
    assert reference["env"]["emulated"].startswith("t4x2") and fit["precision"] == "fp16"
    assert fit["processes"] == 2 and fit["loader_workers"] == 1

    killed = tmp_path / "killed"
    proc = _run(killed, wait=False)
    deadline = time.monotonic() + 300
    while not list(killed.rglob("checkpoints/lstm/*/step-*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_tree(proc)  # papermill, the kernel (a session of its own), the server, the ranks and their workers
    saved = [int(p.stem.split("-")[1]) for p in killed.rglob("checkpoints/lstm/*/step-*.json")]
    assert saved and max(saved) < fit["steps"], "the run finished before it was killed"

    _run(killed)
    resumed, again = _final(killed)
    assert resumed["fit_lstm"]["resumed_from"] and resumed["fit_lstm"]["steps"] == fit["steps"]
    assert weights.keys() == again.keys()
    assert all(torch.equal(weights[k], again[k]) for k in weights), "resumed weights differ"
