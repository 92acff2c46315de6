import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` run only where CUDA is; elsewhere they are skipped, and say so.
    Tests marked ``sandbox`` run last: the sandbox has the whole suite's time to finish."""
    items.sort(key=lambda item: item.get_closest_marker("sandbox") is not None)
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """`make sandbox` runs beside the rest of the suite when its test was collected, at the
    lowest CPU priority and on one thread per kernel: it takes what the suite leaves idle
    (the suite waits on kernels and subprocesses much of the time) and never slows it."""
    if not any(item.get_closest_marker("sandbox") and "every_notebook" in item.name
               for item in session.items):
        return
    import subprocess
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="kkbox-"))
    log = open(folder / "sandbox.log", "w")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAGGLE_", "KAGGLEKIT_"))}
    env["OMP_NUM_THREADS"] = "1"  # no spinning threads competing with the suite's
    proc = subprocess.Popen(["nice", "-n", "19", sys.executable, "-m", "kagglekit.tools.cli", "sandbox",
                             "--keep", str(folder / "box")], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    session.config.kagglekit_sandbox = (proc, folder, log)


@pytest.fixture(autouse=True)
def hermetic_env(monkeypatch, tmp_path):
    """No test sees the developer's Kaggle credentials, a real /kaggle, or a GPU override."""
    for name in list(os.environ):
        if name.startswith(("KAGGLE_", "KAGGLEKIT_")) or name.lower() in ("http_proxy", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    from kagglekit import inputs, policy
    inputs.forget()  # each test mounts its own inputs
    policy.install(None)  # and starts its own run
    yield


@pytest.fixture
def kaggle_tree(tmp_path, monkeypatch):
    """A simulated Kaggle kernel: <root>/input (read-only inputs) and <root>/working."""
    root = tmp_path / "kaggle"
    (root / "input").mkdir(parents=True)
    (root / "working").mkdir()
    monkeypatch.setenv("KAGGLEKIT_ROOT", str(root))
    return root


def run_python(args, **kwargs):
    import subprocess
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE")}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          **kwargs)
