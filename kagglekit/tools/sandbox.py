"""``make sandbox``: what ``make push`` sends, run the way Kaggle runs it, version after version.

For each notebook: the exact build ``make push`` uploads (Kaggle parameters rendered in,
the kit embedded, the wheels dataset for what the image lacks), executed by papermill in
a kernel environment that holds the packages of Kaggle's image (``sandbox/kaggle-image.txt``,
a venv of its own: never the project's, never the kit installed), three versions in a row:

    <root>/input/datasets/sandbox/kagglekit-wheels   the wheels dataset (read-only)
    <root>/input/notebooks/sandbox/<slug>             the previous version's output (read-only)
    <root>/input/competitions/<competition>           a stand-in in the competition's layout
                                                     (tools/standins.py), for competition_sources
    <root>/working                                   this version's output

with the internet dead (proxies at a closed port, pip without an index or config) and
``KAGGLE_KERNEL_RUN_TYPE=Batch``. Every value that shapes the computation is the
notebook's Kaggle parameter; only the amount of work shrinks, two ways: the run context's
work cap (``KAGGLEKIT_WORK_CAP``: each fit's optimizer steps and batches per epoch, its
validation batches too) and the notebook's own ``sandbox`` parameters in its kernel metadata
(amounts only: trials, repeats, boosting rounds, cycles). Version 1 may train; versions 2
and 3 must resume or skip each fit (metrics.json's "chain" says which), never train from
step 0 again.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

IMAGE = Path("sandbox/kaggle-image.txt")
VENV = Path(".sandbox/venv")
OWNER = "sandbox"
VERSIONS = 3
CAP = 1  # KAGGLEKIT_WORK_CAP in the sandbox: one step per fit, one batch per loop
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, every request fails
_BUILDING = threading.Lock()


@dataclass
class Outcome:
    notebook: str
    version: int
    ok: bool
    seconds: float
    verdict: str


def install_packages(image: Path = IMAGE, venv: Path = VENV) -> Path:
    """The kernel environment without torch: Kaggle's packages (re)installed when the image
    list changed. Needs no torch, so `make test` runs it beside the project's own install."""
    python, stamp = venv / "bin" / "python", venv / ".packages-sha256"
    wanted = hashlib.sha256(image.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"sandbox: building the kernel environment {venv} from {image} (once)", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    _, packages = _split_torch(image)
    # --no-compile: the kernels write bytecode at first import (halves the install time)
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile",
                           "--disable-pip-version-check", *packages], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not install {image} into {venv}:\n{done.stderr[-3000:]}")
    stamp.write_text(wanted)
    return python


def kernel_python(image: Path = IMAGE, venv: Path = VENV) -> Path:
    """The sandbox venv's interpreter, torch included; (re)built when the image list changed."""
    python, stamp = venv / "bin" / "python", venv / ".image-sha256"
    wanted = hashlib.sha256(image.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    with _building_lock(venv):  # two test workers, or two `make sandbox`, build it once
        if not (stamp.exists() and stamp.read_text() == wanted):
            _finish(image, venv, python, stamp, wanted)
    return python


@contextlib.contextmanager
def _building_lock(venv: Path):
    import fcntl
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _finish(image: Path, venv: Path, python: Path, stamp: Path, wanted: str) -> None:
    """Kaggle's packages, then the project's torch linked in (or installed), then checked."""
    install_packages(image, venv)
    wanted_torch, _ = _split_torch(image)
    if not _link_torch(python, wanted_torch):
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile",
                        "--disable-pip-version-check", f"torch=={wanted_torch}"], check=True)
    lacking = subprocess.run([str(python), "-I", "-c", "import importlib.util as u; "
                              "print([m for m in ('torch_geometric', 'kagglekit') if u.find_spec(m)])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if lacking != "[]":
        raise RuntimeError(f"the sandbox kernel environment must not have {lacking}")
    stamp.write_text(wanted)


def _split_torch(image: Path) -> tuple[str, list[str]]:
    """(torch's pinned version, every other requirement line) of the image list."""
    lines = [line.split("#")[0].strip() for line in image.read_text().splitlines()]
    lines = [line for line in lines if line]
    torch_pin = next(line for line in lines if line.startswith("torch=="))
    return torch_pin.split("==")[1], [line for line in lines if line != torch_pin]


def _link_torch(python: Path, version: str) -> bool:
    """Link the project's CPU torch into the kernel environment when it is exactly the pinned
    build (700 MB not unpacked twice); only torch's own folders, nothing else of that venv."""
    import torch
    if torch.__version__.split("+")[0] != version:
        return False
    source = Path(torch.__file__).parents[1]
    target = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    names = ["torch", "torchgen", "functorch", *[p.name for p in source.glob("torch-*.dist-info")]]
    for name in names:
        if (source / name).exists():
            (target / name).unlink(missing_ok=True)  # a link left by an interrupted build
            (target / name).symlink_to(source / name)
    return True


def _kernelspec(folder: Path, python: Path) -> Path:
    spec = folder / "kernels" / "kaggle-image"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python.absolute()), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Kaggle image (sandbox)", "language": "python"}))
    return folder


def _kernel_env(root: Path, jupyter: Path, tmp: Path, cap: int, threads: int | None = None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KAGGLE", "PIP_", "PYTHON", "JUPYTER"))
           and k.lower() not in ("http_proxy", "https_proxy", "no_proxy", "all_proxy")}
    if threads and "OMP_NUM_THREADS" not in env:
        # kernels side by side share the cores: OpenMP threads spin-waiting for a busy
        # core cost more CPU time than they save (5 min for all six at 2 jobs, 8 min at 1)
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env.update(KAGGLEKIT_ROOT=str(root), KAGGLE_KERNEL_RUN_TYPE="Batch", KAGGLEKIT_BATCH="1",
               KAGGLEKIT_WORK_CAP=str(cap), JUPYTER_PATH=str(jupyter), TMPDIR=str(tmp),
               HTTP_PROXY=DEAD_PROXY, HTTPS_PROXY=DEAD_PROXY, http_proxy=DEAD_PROXY,
               https_proxy=DEAD_PROXY, NO_PROXY="", no_proxy="", PIP_NO_INDEX="1",
               PIP_CONFIG_FILE=os.devnull)  # no index, no find-links: only the wheels attached
    from ..machine.gpus import inventory
    if not inventory():
        env["KAGGLEKIT_ALLOW_NO_GPU"] = "1"  # a CPU sandbox: the T4 check warns, not fails
    return env


def _mount(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` read-only, as Kaggle mounts an input."""
    shutil.copytree(source, target, symlinks=True)
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)


def _fingerprint(folder: Path) -> dict:
    """What an input holds (a root user ignores the read-only bits: compare instead)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _unmount(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if path.exists() and not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    shutil.rmtree(folder, ignore_errors=True)


def run_version(built: Path, slug: str, version: int, root: Path, previous: Path | None,
                wheels_dataset: Path, jupyter: Path, cap: int,
                competitions: dict | None = None, threads: int | None = None) -> Outcome:
    """One kernel version: mount the inputs, execute, check the inputs and the chain."""
    name = built.stem
    inputs = root / "input"
    _mount(wheels_dataset, inputs / "datasets" / OWNER / "kagglekit-wheels")
    for competition, stand_in in (competitions or {}).items():
        _mount(stand_in, inputs / "competitions" / competition)
    if previous is not None:
        _mount(previous, inputs / "notebooks" / OWNER / slug)
    working = root / "working"
    working.mkdir(parents=True)
    before = _fingerprint(inputs)
    tmp = Path(tempfile.mkdtemp(prefix="kksb-"))  # short: AF_UNIX socket paths stop at 108 bytes
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "papermill", str(built), str(working / built.name),
             "-k", "kaggle-image", "--cwd", str(working), "--no-progress-bar"],
            env=_kernel_env(root, jupyter, tmp, cap, threads), capture_output=True,
            text=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return Outcome(name, version, False, seconds, _first_error(working / built.name, done))
    if _fingerprint(inputs) != before:
        return Outcome(name, version, False, seconds, "FAILED: the run wrote into /kaggle/input")
    metrics = json.loads((working / "metrics.json").read_text())
    ok, text = verdict(version, metrics.get("chain", {}))
    return Outcome(name, version, ok, seconds, text)


def _first_error(executed: Path, done: subprocess.CompletedProcess) -> str:
    try:
        for cell in json.loads(executed.read_text())["cells"]:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    return f"FAILED: {out['ename']}: {out['evalue'][:400]}"
    except (OSError, ValueError, KeyError):
        pass
    return f"FAILED: papermill exit {done.returncode}: {done.stderr.strip()[-400:]}"


def verdict(version: int, chain: dict) -> tuple[bool, str]:
    """Version 1 may train; later versions must resume, skip or hit the cache."""
    groups: dict[str, list[str]] = {}
    for label, did in chain.items():
        groups.setdefault(did, []).append(label)
    text = "; ".join(f"{did}: {', '.join(labels)}" for did, labels in sorted(groups.items()))
    retrained = groups.get("trained", []) + groups.get("computed", []) if version > 1 else []
    if retrained:
        return False, f"FAILED: trained again from scratch: {', '.join(retrained)} ({text})"
    return True, f"ok ({text or 'no fits'})"


def _versions(name: str, meta: dict, notebook: Path, bench: "Bench", cap: int) -> list[Outcome]:
    """Versions 1 to 3 of one notebook, each mounting the previous one's output."""
    from .standins import make
    outcomes, previous = [], None
    competitions = {c: make(c, bench.work / "competitions" / c)
                    for c in meta.get("competition_sources", [])}
    for version in range(1, VERSIONS + 1):
        root = bench.work / name / f"v{version}"
        outcome = run_version(notebook, meta["slug"], version, root, previous, bench.dataset,
                              bench.jupyter, cap, competitions, bench.threads)
        print(f"sandbox {name} v{version}: {outcome.verdict} [{outcome.seconds:.1f} s]", flush=True)
        outcomes.append(outcome)
        if not outcome.ok:
            break
        previous = root / "working"
    return outcomes


@dataclass
class Bench:
    """What every notebook's versions share: the kernel environment's spec, the kit's
    wheel and the wheels dataset (built once per sandbox run)."""
    work: Path
    jupyter: Path
    kit_wheel: Path
    dataset: Path
    threads: int | None = None  # per kernel, when several run side by side


def prepare(work: Path, names: list[str], jobs: int = 1) -> Bench:
    """The kernel environment, the kit's wheel and the wheels dataset for ``names``."""
    from .publish import build as build_mod, metadata, wheels
    python = kernel_python()
    jupyter = _kernelspec(work / "jupyter", python)
    kit_wheel, _ = build_mod.build_wheel(work / "build" / "_wheel")
    extras = sorted({w for n in names
                     for w in metadata.load(Path("kernel-metadata") / f"{n}.json").get("wheels", [])})
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    return Bench(work, jupyter, kit_wheel, wheels.build_dataset(work / "wheels", OWNER, kit_wheel, extras),
                 threads)


def run_notebook(name: str, bench: Bench, cap: int = CAP) -> list[Outcome]:
    """``name`` built exactly as ``make push`` builds it, then its three versions."""
    from .publish import build as build_mod, metadata
    meta = metadata.load(Path("kernel-metadata") / f"{name}.json")
    with _BUILDING:  # one build at a time: they share the build folder and git's index
        built = build_mod.build(name, out_root=bench.work / "build", wheel=bench.kit_wheel, owner=OWNER,
                                overrides=meta.get("sandbox"))
    return _versions(name, meta, built / f"{meta['slug']}.ipynb", bench, cap)


def sandbox(names: list[str], cap: int = CAP, keep: Path | None = None, jobs: int = 1) -> int:
    """Every notebook in ``names``, three versions each (``jobs`` notebooks at a time);
    0 when all are ok."""
    from concurrent.futures import ThreadPoolExecutor
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="kagglekit-sandbox-"))
    outcomes = []
    try:
        bench = prepare(work, names, jobs)
        with ThreadPoolExecutor(max(1, jobs)) as pool:  # each notebook's versions stay in order
            runs = [pool.submit(run_notebook, n, bench, cap) for n in names]
            outcomes = [o for r in runs for o in r.result()]
    finally:
        if keep is None:
            _unmount(work)
    failed = [o for o in outcomes if not o.ok]
    print(f"sandbox: {len(outcomes) - len(failed)} of {len(outcomes)} versions ok"
          f"{' (work capped at ' + str(cap) + ' steps)' if cap else ''}")
    return 1 if failed or not outcomes else 0
