"""The Kaggle round trip behind ``make build/push/status/logs/output/pull/quota/compare``.

Each command takes the notebook names and parsed options, talks to Kaggle only through
``kaggle_cli`` (the real CLI), prints for a person, and returns the exit status.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ...state import atomic
from . import build as build_mod, credentials, kaggle_cli, metadata, wheels
from .build import build, build_root

METADATA_DIR = Path("kernel-metadata")
LOG_TAIL = 30  # lines of an ERROR run's log that `make status` shows


def kernel_of(name: str) -> tuple[str, dict]:
    """(owner/slug, validated metadata) of notebook ``name``."""
    meta = metadata.load(METADATA_DIR / f"{name}.json")
    return f"{credentials.username()}/{meta['slug']}", meta


def build_all(names: list[str]) -> int:
    for name in names:
        print(f"built {build(name)}/")
    return 0


SESSIONS = 2  # GPU batch sessions Kaggle runs at once per account (more wait in its queue)
POLL_ENV = "KAGGLEKIT_QUEUE_POLL_S"  # seconds between status polls while pushes wait (tests)


def push_all(names: list[str], accelerator: str, sessions: int = SESSIONS, sleep=time.sleep) -> int:
    """Every check passes before the first upload; one failed push does not stop the rest.
    At most ``sessions`` of these kernels run at once: the next is pushed when one ends."""
    if sessions < 1:
        print(f"error: --sessions {sessions}: at least one session must run", file=sys.stderr)
        return 2
    problem = metadata.check_shape(accelerator)
    if problem:
        print(f"error: --accelerator: {problem}", file=sys.stderr)
        return 2
    from ..standins import SERVED
    stand_ins = [n for n in names if SERVED in metadata.load(METADATA_DIR / f"{n}.json").get("competition_sources", [])]
    if stand_ins:
        print(f"error: {', '.join(stand_ins)} attach {SERVED}, the sandbox's stand-in of an inference-server "
              "competition (make sandbox NB=...); on Kaggle, attach a real one", file=sys.stderr)
        return 2
    owner = credentials.username()  # before any work: a push needs an account
    _require_published_models(names, owner)
    folders = [build(name, owner=owner) for name in names]
    try:
        _publish_wheels(names, owner)
    except (kaggle_cli.KaggleError, wheels.WheelError) as err:
        print(f"error: the wheels dataset: {err}", file=sys.stderr)
        return 1
    results: list = []
    running: dict = {}
    queue = list(zip(names, folders))
    poll_s = float(os.environ.get(POLL_ENV, 60))
    while queue:
        running = _still_running(running)
        if len(running) >= sessions:
            print(f"queue: running {', '.join(running)}; waiting: {', '.join(n for n, _ in queue)} "
                  f"(at most {sessions} sessions at once; next check in {poll_s:g} s)", flush=True)
            sleep(poll_s)
            continue
        name, folder = queue.pop(0)
        result = _push_one(name, folder, accelerator)
        results.append(result)
        if result[1] != "FAILED":
            running[name] = json.loads((folder / "kernel-metadata.json").read_text())["id"]
    if len(results) > 1:
        print("\n".join(["", "push summary:"] + [f"  {n}: {s} ({d})" for n, s, d in results]))
    return 0 if all(state == "pushed" for _, state, _ in results) else 1


def _require_published_models(names: list[str], owner: str) -> None:
    """A kernel attaching a Model version of another kernel's weights: that version exists."""
    from . import models
    for name in names:
        meta = metadata.load(METADATA_DIR / f"{name}.json")
        if meta.get("weights_via") == "model":
            trained = meta["weights_from"]
            models.require_published(trained, metadata.load(METADATA_DIR / f"{trained}.json"), owner)


def _push_one(name: str, folder: Path, accelerator: str) -> tuple[str, str, str]:
    try:
        pushed = kaggle_cli.push(folder, accelerator=accelerator)
    except kaggle_cli.KaggleError as err:
        print(f"{name}: push FAILED: {err}", file=sys.stderr)
        return name, "FAILED", str(err).splitlines()[0]
    for line in pushed.warnings + pushed.problems:
        print(f"{name}: warning: {line}", file=sys.stderr)
    pinning = json.loads((folder / "kernel-metadata.json").read_text()).get("docker_image_pinning_type")
    image = ("its first version's image kept (docker_image_pinning_type: original)" if pinning == "original"
             else "Kaggle's newest image (docker_image_pinning_type: latest)")
    print(f"pushed {folder.name}: version {pushed.version} -> {pushed.url}; {image}", flush=True)
    state = "pushed with problems" if pushed.problems else "pushed"
    return name, state, f"version {pushed.version} -> {pushed.url}"


def _still_running(running: dict) -> dict:
    """The pushed kernels whose session has not ended. A status that cannot be read counts as
    ended, with a warning: waiting on it could wait forever, and a push past the account's
    limit only waits in Kaggle's own queue."""
    left = {}
    for name, kernel in running.items():
        try:
            state = kaggle_cli.status(kernel).state
        except kaggle_cli.KaggleError as err:
            print(f"{name}: warning: its status cannot be read ({str(err).splitlines()[0]}); "
                  "counted as ended", file=sys.stderr)
            continue
        if state not in kaggle_cli.DONE:
            left[name] = kernel
        else:
            print(f"{name}: {state}: its session ended", flush=True)
    return left


def _publish_wheels(names: list[str], owner: str) -> None:
    """The wheels dataset the pushed notebooks install from, created or versioned and
    ready before the first of them is pushed."""
    extras = sorted({w for name in names for w in metadata.load(
        METADATA_DIR / f"{name}.json").get("wheels", [])})
    if not extras:
        return
    root = build_root()
    kit_wheel = next((root / "_wheel").glob("kagglekit-*.whl"))
    folder = wheels.build_dataset(root / "_wheels_dataset", owner, kit_wheel, extras)
    commit = build_mod.git_state()["commit"][:12]
    print(wheels.publish(folder, owner, f"kagglekit {commit}: {', '.join(extras)}"))


def status_all(names: list[str], wait: bool, timeout: float) -> int:
    failed = False
    for name in names:
        kernel, _ = kernel_of(name)
        st = kaggle_cli.wait(kernel, timeout) if wait else kaggle_cli.status(kernel)
        print(f"{kernel}: {st.state}" + (f" ({st.failure})" if st.failure else ""))
        if st.state == "ERROR":
            tail = kaggle_cli.logs(kernel).rstrip().splitlines()[-LOG_TAIL:]
            print("\n".join([f"--- the last {len(tail)} lines of its log (make logs NB={name}):",
                             *tail]))
        failed |= st.state not in ("COMPLETE", "RUNNING", "QUEUED") or (wait and st.state != "COMPLETE")
    return 1 if failed else 0


def logs_all(names: list[str]) -> int:
    for name in names:
        kernel, _ = kernel_of(name)
        print(kaggle_cli.logs(kernel))
    return 0


def output_all(names: list[str], output_root: str, force: bool, version: int | None = None) -> int:
    """Download a finished run's files under the version the server reports; ``version``: that
    version's files instead (kagglehub reaches any version; the CLI only the latest)."""
    failed = False
    for name in names:
        kernel, meta = kernel_of(name)
        if version is not None:
            dest = Path(output_root) / meta["slug"] / f"v{version}"
            files = fetch_version(kernel, version, dest)
            print(f"{kernel}: version {version}: {len(files)} files -> {dest}/")
            continue
        st = kaggle_cli.status(kernel)
        if st.state in kaggle_cli.BUSY and not force:
            print(f"{kernel} is {st.state}: its outputs are not written yet. Wait (make status "
                  f"NB={name} WAIT=1) or take what is there with FORCE=1.", file=sys.stderr)
            failed = True
            continue
        current = kaggle_cli.current_version(kernel)
        dest = Path(output_root) / meta["slug"] / (f"v{current}" if current else "latest")
        files = kaggle_cli.output(kernel, dest)
        atomic.write_json(dest / "kaggle.json", {"version": current, "status": st.state, "time": time.time()})
        print(f"{kernel}: {st.state}, version {current}: {len(files)} files -> {dest}/")
    return 1 if failed else 0


def fetch_version(kernel: str, version: int, dest: Path) -> list[Path]:
    """Version ``version`` of ``kernel``'s output into ``dest``, once the download is complete (a
    failed one leaves an earlier copy as it was)."""
    import shutil

    import kagglehub
    from kagglehub.exceptions import KaggleApiHTTPError
    partial = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        kagglehub.notebook_output_download(f"{kernel}/versions/{version}", output_dir=str(partial))
    except KaggleApiHTTPError as err:
        shutil.rmtree(partial, ignore_errors=True)
        raise kaggle_cli.KaggleError(f"{kernel} has no output of version {version} "
                                     f"({str(err).splitlines()[0]}): make status NB=... names the latest") from None
    shutil.rmtree(partial / ".complete", ignore_errors=True)  # kagglehub's own marker, not the run's
    atomic.write_json(partial / "kaggle.json", {"version": version, "status": "fetched by version number",
                                                "time": time.time()})
    if dest.exists():  # fetched before (by make output, with its log): updated, nothing of it dropped
        shutil.copytree(partial, dest, dirs_exist_ok=True)
        shutil.rmtree(partial)
    else:
        partial.rename(dest)
    return sorted(p for p in dest.rglob("*") if p.is_file() and p.name != "kaggle.json")


def data_all(names: list[str], force: bool = False) -> int:
    """``make data``: every competition and dataset the kernels attach, into ``data/<slug>/``."""
    from . import data
    credentials.username()  # before any download: the CLI needs an account
    wanted = {ref: kind for name in names for kind, ref in data.sources(kernel_of(name)[1])}
    if not wanted:
        print(f"{', '.join(names)}: no competition or dataset sources to download "
              "(the notebook uses its built-in data)")
        return 0
    for ref, kind in wanted.items():
        folder = data.download(kind, ref, force=force)
        print(f"  a local run reads it with data_dir=\"{ref}\" (or \"{folder}\")")
    return 0


def quota() -> int:
    print(kaggle_cli.quota())
    return 0
