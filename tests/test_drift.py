"""The image Kaggle really ran: each run records the packages it imported; `make drift` prints
how they differ from the sandbox's pins and can adopt them."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import kagglekit as kk
from kagglekit.tools import drift

REPO = Path(__file__).resolve().parents[1]


def test_a_run_records_the_versions_it_imported_and_the_image_build(tmp_path, monkeypatch):
    import numpy
    import torch
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path))
    monkeypatch.setenv("GIT_COMMIT", "78aaa43c0ffee")
    monkeypatch.setenv("BUILD_DATE", "20260812-000000")
    declared = {"seed": 0, "data_dir": "", "force_retrain": False, "time_budget_s": 0.0}
    run = kk.start(dict(declared), "drift", declared=dict(declared), verbose=False)
    run.summary([kk.headline("anything", 1.0)])
    recorded = json.loads((tmp_path / "metrics.json").read_text())["packages"]
    assert recorded["imported"]["torch"] == torch.__version__
    assert recorded["imported"]["numpy"] == numpy.__version__
    assert recorded["image"] == {"git_commit": "78aaa43c0ffee", "build_date": "20260812-000000"}


def _kaggle_output(runs: Path, version: int, imported: dict) -> None:
    folder = runs / "kaggle" / "kagglekit-quickstart" / f"v{version}"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"packages": {
        "imported": imported, "python": "3.12.11", "image": {"git_commit": "78aaa43", "build_date": "2026-08-12"}}}))


def test_make_drift_prints_each_difference_and_the_rewrite_makes_the_pins_match(tmp_path):
    image = tmp_path / "kaggle-image.txt"
    shutil.copy(REPO / "sandbox" / "kaggle-image.txt", image)
    pinned = {k: v for k, (_, v) in drift.pins(image.read_text()).items()}
    runs = tmp_path / "runs"
    _kaggle_output(runs, 2, {"numpy": "1.0.0"})  # an older version: the newest one counts
    ran = {"numpy": "2.4.5", "pandas": pinned["pandas"], "torch": "2.10.0+cu128", "xgboost": "3.2.1",
           "transformers": "5.1.0", "rich": "13.9.4"}  # rich: imported, not pinned (no drift)
    _kaggle_output(runs, 3, ran)
    cmd = [sys.executable, "-m", "kagglekit.tools.cli", "drift", "quickstart", "--runs", str(runs),
           "--image", str(image)]
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert first.returncode == 1, first.stderr
    out = first.stdout
    assert "kagglekit-quickstart v3: Python 3.12.11, image 78aaa43 built 2026-08-12" in out
    for line in (f"numpy: pinned {pinned['numpy']}, Kaggle ran 2.4.5",
                 f"xgboost-cpu: pinned {pinned['xgboost-cpu']}, Kaggle ran 3.2.1",
                 f"transformers: pinned {pinned['transformers']}, Kaggle ran 5.1.0",
                 f"torch: pinned {pinned['torch']}, Kaggle ran 2.10.0+cu128 (not rewritten"):
        assert line in out, out
    assert "pandas" not in out and "rich" not in out
    rewritten = subprocess.run([*cmd, "--rewrite"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "rewritten from kagglekit-quickstart v3" in rewritten.stdout
    text = image.read_text()
    assert "numpy==2.4.5  # [kaggle kagglekit-quickstart v3]" in text
    assert "transformers==5.1.0  # [kaggle kagglekit-quickstart v3]" in text
    assert "xgboost-cpu==3.2.1  # [kaggle kagglekit-quickstart v3]" in text
    assert f"torch=={pinned['torch']}\n" in text  # the CPU stand-in stays
    after = {k: v for k, (_, v) in drift.pins(text).items()}
    assert [d["package"] for d in drift.differences(text, ran)] == ["torch"]
    # the sandbox's kernel environment is keyed by the list's content: it rebuilds from these pins
    from kagglekit.tools.kernelenv import _split_torch
    _, packages = _split_torch(image)
    assert "numpy==2.4.5" in packages and after["numpy"] == "2.4.5"
