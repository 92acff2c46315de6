"""The Kaggle round trip behind ``make build/push/status/logs/output/pull/quota/compare``.

Each command takes the notebook names and parsed options, talks to Kaggle only through
``kaggle_cli`` (the real CLI), prints for a person, and returns the exit status.
"""
from __future__ import annotations

import sys
from pathlib import Path

from . import credentials, kaggle_cli, metadata
from . import build as build_mod, wheels
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


def push_all(names: list[str], accelerator: str) -> int:
    """Every check passes before the first upload; one failed push does not stop the rest."""
    problem = metadata.check_shape(accelerator)
    if problem:
        print(f"error: --accelerator: {problem}", file=sys.stderr)
        return 2
    owner = credentials.username()  # before any work: a push needs an account
    folders = [build(name, owner=owner) for name in names]
    try:
        _publish_wheels(names, owner)
    except (kaggle_cli.KaggleError, wheels.WheelError) as err:
        print(f"error: the wheels dataset: {err}", file=sys.stderr)
        return 1
    results = []
    for name, folder in zip(names, folders):
        try:
            pushed = kaggle_cli.push(folder, accelerator=accelerator)
        except kaggle_cli.KaggleError as err:
            print(f"{name}: push FAILED: {err}", file=sys.stderr)
            results.append((name, "FAILED", str(err).splitlines()[0]))
            continue
        for line in pushed.warnings + pushed.problems:
            print(f"{name}: warning: {line}", file=sys.stderr)
        state = "pushed with problems" if pushed.problems else "pushed"
        results.append((name, state, f"version {pushed.version} -> {pushed.url}"))
        print(f"pushed {folder.name}: version {pushed.version} -> {pushed.url}")
    if len(results) > 1:
        print("\n".join(["", "push summary:"] + [f"  {n}: {s} ({d})" for n, s, d in results]))
    return 0 if all(state == "pushed" for _, state, _ in results) else 1


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


def output_all(names: list[str], output_root: str, force: bool) -> int:
    """Download a finished run's files under the version the server reports."""
    failed = False
    for name in names:
        kernel, meta = kernel_of(name)
        st = kaggle_cli.status(kernel)
        if st.state in kaggle_cli.BUSY and not force:
            print(f"{kernel} is {st.state}: its outputs are not written yet. Wait (make status "
                  f"NB={name} WAIT=1) or take what is there with FORCE=1.", file=sys.stderr)
            failed = True
            continue
        version = kaggle_cli.current_version(kernel)
        dest = Path(output_root) / meta["slug"] / (f"v{version}" if version else "latest")
        files = kaggle_cli.output(kernel, dest)
        print(f"{kernel}: {st.state}, version {version}: {len(files)} files -> {dest}/")
    return 1 if failed else 0


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
