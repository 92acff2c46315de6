"""The lent GPU's check stays ready: `make gpu-bundle` builds under its limit for the device's
Python, and the check's dry run installs it here, imports what every notebook imports and runs a
notebook's smoke; an altered wheel is refused before anything runs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


@pytest.mark.slow
@pytest.mark.e2e  # the check's environment end to end: built, installed, a notebook run in it
def test_the_bundle_holds_what_the_device_lacks_and_its_dry_run_installs_imports_and_runs_a_smoke(tmp_path):
    """One build for both checks (building it takes half a minute of a worker)."""
    import gpu_check
    from gpu_checks import setup
    bundle = tmp_path / "bundle"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_bundle.py"), "--out", str(bundle)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    manifest = json.loads((bundle / "manifest.json").read_text())
    names = {w["name"].lower() for w in manifest["wheels"]}
    assert {"papermill", "ipykernel", "optuna", "lightgbm", "xgboost-cpu", "kaggle", "soundfile", "cffi"} <= names
    provided = {p["name"].lower() for p in manifest["provided_by_the_image"]}
    assert {"numpy", "scipy", "pyyaml"} <= provided and not names & {"torch", "numpy", "transformers"}
    assert manifest["bytes"] <= 56 * 2**20
    assert all(setup.fits_the_device(bundle / w["file"]) for w in manifest["wheels"])
    assert len(setup.verified(bundle)) == len(manifest["wheels"])

    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--bundle", str(bundle),
                           "--dry-run", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "no CUDA" in done.stdout, done.stdout + done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["dry_run"]["ok"] and report["dry_run"]["imports"] >= 15
    assert "gpu-check plan: precision 55 s, graphs 30 s, optimisations 60 s," in done.stdout  # each check's budget
    assert report["plan"] == dict(gpu_check.CHECKS) and sum(report["plan"].values()) <= 480
    assert report["bundle"]["installed"] + report["bundle"]["checked_by_tag"] == len(manifest["wheels"])


def test_an_altered_wheel_is_refused_before_anything_is_installed(tmp_path):
    from gpu_checks import setup
    wheel = tmp_path / "tiny-1.0-py3-none-any.whl"
    wheel.write_bytes(b"a wheel")
    (tmp_path / "manifest.json").write_text(json.dumps({"wheels": [
        {"name": "tiny", "version": "1.0", "file": wheel.name, "sha256": "0" * 64}]}))
    with pytest.raises(setup.BundleError, match="tiny-1.0-py3-none-any.whl is missing or altered.*make gpu-bundle"):
        setup.install(tmp_path, tmp_path / "target", dry_run=True)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(setup.BundleError, match="no manifest.json: run `make gpu-bundle` first"):
        setup.verified(tmp_path)


def test_a_check_killed_at_its_limit_keeps_the_rows_it_reported(tmp_path, monkeypatch):
    """The notebooks check ran past its limit on a lent H100 and came back with no row at all."""
    import gpu_check
    checks = tmp_path / "benchmarks" / "gpu_checks"
    checks.mkdir(parents=True)
    (checks / "slow.py").write_text("import time\nprint('PART {\"notebook\": \"quickstart\", \"ok\": true}', "
                                    "flush=True)\ntime.sleep(60)\n")
    monkeypatch.setattr(gpu_check, "REPO", tmp_path)
    verdict = gpu_check.run_check("slow", 3, None)
    assert verdict["ok"] is False and verdict["error"] == "no verdict (over 3 s)"
    assert verdict["parts"] == [{"notebook": "quickstart", "ok": True}]


def test_one_visit_s_checks_fit_eight_minutes_and_each_knows_its_own_deadline(tmp_path, monkeypatch):
    """A lent card gives 15 minutes with its start-up: the default checks' limits sum to at most 480 s,
    and each check is told its limit (less a margin) to keep its own deadline inside it."""
    import gpu_check
    assert sum(limit for _, limit in gpu_check.CHECKS) <= gpu_check.BUDGET_S == 480
    assert [name for name, _ in gpu_check.CHECKS][:4] == ["precision", "graphs", "optimisations", "nccl"]  # figures
    checks = tmp_path / "benchmarks" / "gpu_checks"
    checks.mkdir(parents=True)
    (checks / "told.py").write_text("import json, os\nprint('RESULT ' + json.dumps({'ok': True, 'deadline': "
                                    "os.environ['KAGGLEKIT_CHECK_DEADLINE_S']}))\n")
    monkeypatch.setattr(gpu_check, "REPO", tmp_path)
    assert gpu_check.run_check("told", 40, None)["deadline"] == "25"


def test_the_report_holds_the_seeds_rows_and_names_what_a_short_visit_did_not_measure():
    """The dated block carries one row per optimisation of the guide, its gain read from the check
    that measured it; a check cut short leaves its rows "not measured this visit", never empty."""
    import gpu_check
    results = [
        {"check": "precision", "ok": True, "seconds": 40, "rows": [{"workload": "U-Net", "fp16_speedup": 3.8}]},
        {"check": "graphs", "ok": True, "seconds": 20, "graph_over_sync": 1.81},
        {"check": "optimisations", "ok": False, "seconds": 60, "error": "no verdict (over 60 s)",
         "gnn": {"against_none": {"accumulate=2": {"step": 1.7, "wait": 1.1, "memory": 1.0},
                                  "grad_checkpointing": {"step": 1.3, "wait": 1.0, "memory": 0.62}}}},
    ]
    found = {"versions": {"device": "a card"}, "drift": {}}
    text = gpu_check.block(found, results)
    assert "| mixed precision (fp16 + GradScaler), samples/s | U-Net x3.8 | precision |" in text
    assert "| CUDA graphs, the utilisation study's cycles/s | x1.81 | graphs |" in text
    assert "| activation checkpointing, the GNN's peak memory | x0.62 memory | optimisations |" in text
    assert "| gradient accumulation 2, the GNN's step | x1.7 step time | optimisations |" in text
    for cut_short in ("torch.compile, the GNN's step", "cuDNN autotuning, the U-Net's step", "the second GPU"):
        assert f"| {cut_short} | not measured this visit |" in text
