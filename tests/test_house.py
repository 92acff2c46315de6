"""A clean house: what the kit writes (a push, a Planetoid load, volumes, tables, a wheel) lands
in the folders it is given and leaves no trace in the checkout or the temporary folder.

The whole suite is held to the same by ``conftest.py``: it compares the checkout's git status
before and after the session and fails the run when a test wrote into it."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLANETOID = REPO.parent / "shared" / "data" / "planetoid"
sys.path.insert(0, str(Path(__file__).parent))
from kaggle_server import FakeKaggle  # noqa: E402

# torch keeps its compiler cache in the temporary folder, and PyG the message-passing code it
# generates per layer class (imported from there while the process lives): theirs, not ours.
THEIRS = ("torchinductor_", "torch_geometric.nn.")


def git_status() -> str:
    # --ignored: a build/ or runs/ folder written into the checkout shows up too.
    return subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture
def scratch(monkeypatch):
    """Every temporary file of the test (ours and the CLI's) lands here; a short path, as
    /tmp is, so sockets opened there stay under 108 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="kkh-"))
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    import shutil
    shutil.rmtree(folder, ignore_errors=True)


def _left_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(THEIRS))


@pytest.mark.slow
def test_a_push_and_the_readers_leave_the_checkout_and_tmp_as_they_were(tmp_path, scratch,
                                                                        monkeypatch):
    import numpy as np
    import pandas as pd

    from kagglekit import graphsets, timeseries, volumes
    before = git_status()
    with FakeKaggle() as kaggle:  # a push: build, wheel, upload state, the real CLI
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KAGGLE", "KAGGLEKIT"))}
        env.update(kaggle.env(tmp_path / "home"), KAGGLEKIT_BUILD=str(tmp_path / "build"))
        done = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "push", "quickstart"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    if PLANETOID.is_dir():  # PyG writes its processed files next to the raw ones: a copy in tmp
        assert graphsets.load_planetoid(PLANETOID / "Cora").num_nodes == 2708
    volumes.write_synthetic(tmp_path / "vesuvius", [24, 32], [24])
    assert volumes.read_layout(tmp_path / "vesuvius").image("train001").shape == (32, 32, 32)
    pd.DataFrame({"time": np.arange(30), "target": np.arange(30.0)}).to_parquet(tmp_path / "t.parquet")
    timeseries.read_table(tmp_path / "t.parquet", time="time", target="target")
    assert git_status() == before, "the kit wrote into the checkout"
    assert _left_in(scratch) == [], "the kit left files in the temporary folder"


def test_files_the_kit_writes_have_normal_modes(tmp_path):
    from kagglekit import atomic
    old = os.umask(0o022)
    try:
        path = tmp_path / "metrics.json"
        atomic.write_json(path, {"a": 1})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert json.loads(path.read_text()) == {"a": 1}
