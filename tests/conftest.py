import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """The longest first (the sandbox's notebooks, then the other slow ones), so that the
    xdist workers (`make test`, `make test-e2e`) end together. Tests marked ``gpu`` run only where CUDA is;
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
_RUNNING = pytest.StashKey[set]()
_TEMP = pytest.StashKey[set]()
TEMP_LEAK_LIMIT = 50 * 2**20  # the kit's own caches of built-in data there are a few MB in all
TEMP_NEEDED = 4 * 2**30  # the e2e tier's peak there: 2.6 GB (2026-12-07, three workers, each test's kernels
# removed once it passed); the disk is shared, so a margin: CI's run of that day ran it full at 1132 s


def _new_files() -> set[str]:
    """Untracked and ignored paths of the checkout (what a test writing into it would add)."""
    import subprocess
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
                         cwd=REPO, capture_output=True, text=True).stdout
    return {line[3:] for line in out.splitlines() if line[:2] in ("??", "!!")
            and not line[3:].startswith((".venv/", ".sandbox/", ".pytest_cache/"))  # pytest's own
            and "__pycache__" not in line}


def _users_runs() -> set[str]:
    """The checkout's run folders a live ``make run`` is writing (status "running", its process
    alive): the user's, not a test's, so what they add is not the suite's."""
    import json
    import socket
    folders = set()
    for status in REPO.glob("runs/*/*/status.json"):
        try:
            said = json.loads(status.read_text())
            os.kill(int(said["pid"]), 0)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if said.get("status") == "running" and said.get("host") == socket.gethostname():
            folders.add(f"{status.parent.relative_to(REPO)}/")
    return folders


SUITE_TEMP = "KAGGLEKIT_SUITE_TEMP"  # the suite's own temp folder, made by the controller, inherited by all


def pytest_configure(config):
    """The suite writes into a temp folder of its own (TMPDIR for its workers, kernels and every
    subprocess), so what it leaves is judged there: a neighbour writing 13 GB into the system's temp
    folder during the run once failed a green suite. Made once, by the controller, before the
    workers start."""
    if hasattr(config, "workerinput") or os.environ.get(SUITE_TEMP):
        return
    system = Path(tempfile.gettempdir())
    for stale in system.glob("kagglekit-suite-*"):  # a run killed before its end left its folder
        if not _pid_alive(stale.name.rsplit("-", 1)[-1]):
            shutil.rmtree(stale, ignore_errors=True)
    own = system / f"kagglekit-suite-{os.getpid()}"
    own.mkdir(exist_ok=True)
    os.environ[SUITE_TEMP] = os.environ["TMPDIR"] = str(own)
    tempfile.tempdir = str(own)


def _pid_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _temp_entries() -> set[str]:
    """What the temp folder holds, pytest's own folders aside (their retention is pytest's:
    tmp_path_retention_policy), and torch's compile cache (torchinductor_<user>: the compiled tests
    fill it by design, about 150 MB; it goes with the suite's folder)."""
    return {p.name for p in Path(tempfile.gettempdir()).iterdir()
            if not p.name.startswith(("pytest-of-", "torchinductor_"))}


def _bytes_under(path: Path) -> int:
    """Bytes of the files under ``path`` (os.walk: what vanishes meanwhile is skipped)."""
    files = [path] if path.is_file() else [Path(d, f) for d, _, names in os.walk(path) for f in names]
    total = 0
    for f in files:
        try:
            total += 0 if f.is_symlink() else f.stat().st_size
        except OSError:
            pass
    return total


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller, once per run
        _enough_temp_space()
        session.config.stash[_CHECKOUT] = _new_files()
        session.config.stash[_RUNNING] = _users_runs()
        session.config.stash[_TEMP] = _temp_entries()


def _enough_temp_space() -> None:
    """A full temp folder fails tests at random, deep in a fixture ("No space left on device"
    in mkdir): say so once, first, with the fix."""
    temp = tempfile.gettempdir()
    free = shutil.disk_usage(temp).free
    if free < TEMP_NEEDED:
        pytest.exit(f"the temp folder {temp} has {free / 2**30:.1f} GB free and the suite needs about "
                    f"{TEMP_NEEDED / 2**30:.0f} GB there: free some (old pytest-of-* folders, clones) or point "
                    "TMPDIR at a larger disk", returncode=1)


def _temp_left_behind(before: set[str]) -> list[tuple[int, str]]:
    """The largest things the session left in the temp folder, when they pass the limit: a
    runner that keeps /tmp between jobs (CI's did) fills up run after run."""
    root = Path(tempfile.gettempdir())
    left = sorted(((_bytes_under(root / name), name) for name in _temp_entries() - before), reverse=True)
    return left if sum(size for size, _ in left) > TEMP_LEAK_LIMIT else []


def pytest_sessionfinish(session, exitstatus):
    """The suite as a whole leaves the checkout as it found it (tests write into tmp_path), and
    the temp folder without what fills a disk."""
    before = session.config.stash.get(_CHECKOUT, None)
    if before is None:
        return
    users = session.config.stash[_RUNNING] | _users_runs()
    added = sorted(p for p in _new_files() - before if not p.startswith(tuple(users)))
    if added:
        print(f"\nthe tests wrote into the checkout: {added[:10]}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    left = _temp_left_behind(session.config.stash[_TEMP])
    if left:
        print(f"\nthe tests left {sum(n for n, _ in left) / 2**20:.0f} MiB in {tempfile.gettempdir()}: "
              f"{[(name, f'{n / 2**20:.1f} MiB') for n, name in left[:10]]}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    for path in Path(tempfile.gettempdir()).iterdir():  # judged: the rest goes (pytest keeps failed tests' folders)
        if not path.name.startswith(("pytest-of-", "pymp-")):  # multiprocessing removes its own at exit
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink()



@pytest.fixture(scope="session")
def kernel_env():
    """The sandbox's kernel venv, Kaggle's image (`make test` builds it first; reused while the
    image list is unchanged): its python."""
    import contextlib
    import subprocess

    from kagglekit.tools.kernelenv import kernel_python
    with contextlib.chdir(REPO):  # sandbox/ is read relative to the checkout
        python = kernel_python()
    have = subprocess.run([str(python), "-I", "-c", "import importlib.util as u, torch, numpy; "
                           "print(*(u.find_spec(m) is None for m in ('torch_geometric', 'kagglekit',"
                           " 'imagecodecs')), numpy.__version__)"], capture_output=True, text=True,
                          check=True)
    # Kaggle's NumPy 2.4; no PyG, no kit, no imagecodecs (the image lacks all three)
    assert have.stdout.split() == ["True", "True", "True", "2.4.4"]
    return python


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
def half_kernels(monkeypatch):
    """The emulated fp16 in bf16 kernels whatever this CPU has (``cpuhalf`` picks fp32 where bf16
    is slow), for the tests of the half path: a dtype mismatch, a loss on half logits. Their
    shapes are small: a slow bf16 costs them little."""
    monkeypatch.setenv("KAGGLEKIT_CPU_HALF", "bf16")


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
