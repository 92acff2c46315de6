import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """The longest first (the sandbox's notebooks, then the other slow ones), so that two
    xdist workers (`make test`) end together. Tests marked ``gpu`` run only where CUDA is;
    elsewhere they are skipped, and say so."""
    items.sort(key=lambda item: 0 if "sandbox" in item.keywords else 1 if "slow" in item.keywords else 2)
    if cuda_here():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def cuda_here() -> bool:
    """A real CUDA GPU, asked through NVML: ``torch.cuda.is_available()`` before the kit is
    imported would open the driver in the pytest process (the kit sets
    PYTORCH_NVML_BASED_CUDA_CHECK when imported), costing every later test GPU memory."""
    from kagglekit import emulate, gpus
    return bool(gpus.inventory()) and not emulate.active()


_CHECKOUT = pytest.StashKey[set]()


def _new_files() -> set[str]:
    """Untracked and ignored paths of the checkout (what a test writing into it would add)."""
    import subprocess
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
                         cwd=REPO, capture_output=True, text=True).stdout
    return {line[3:] for line in out.splitlines() if line[:2] in ("??", "!!")
            and not line[3:].startswith((".venv/", ".sandbox/", ".pytest_cache/"))  # pytest's own
            and "__pycache__" not in line}


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller, once per run
        session.config.stash[_CHECKOUT] = _new_files()


def pytest_sessionfinish(session, exitstatus):
    """The suite as a whole leaves the checkout as it found it (tests write into tmp_path)."""
    before = session.config.stash.get(_CHECKOUT, None)
    if before is None:
        return
    added = sorted(_new_files() - before)
    if added:
        print(f"\nthe tests wrote into the checkout: {added[:10]}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED



@pytest.fixture(autouse=True)
def hermetic_env(monkeypatch, tmp_path):
    """No test sees the developer's Kaggle credentials, a real /kaggle, or a GPU override."""
    for name in list(os.environ):
        if name.startswith(("KAGGLE_", "KAGGLEKIT_")) or name.lower() in ("http_proxy", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    from kagglekit import inputs
    inputs.forget()  # each test mounts its own inputs
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
