"""The wheels dataset: what Kaggle's image lacks, reaching a kernel with internet off.

A private Kaggle dataset ``<owner>/kagglekit-wheels`` holds the kit's own wheel and
the wheel of every extra package a notebook names in its kernel-metadata
(``"wheels": ["torch-geometric"]``), at the versions requirements.txt pins. ``make
push`` builds it, creates or versions it with the real kaggle CLI, waits until
Kaggle has processed it, and attaches it through ``dataset_sources``; the
notebook's first cell installs from it (``--no-index --no-deps``, into a private
folder: the image's torch is never replaced).

The kit stays embedded in every notebook as well: each kernel version then carries
the exact code it ran, and a notebook without extras needs no dataset at all.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

# The interpreter and platform of Kaggle's image, which the wheels are for (never the local one):
# CPython 3.12 on manylinux x86_64 (Kaggle/docker-python's base; see sandbox/kaggle-image.txt). pip takes
# each --platform literally (manylinux_2_28 does not admit a 2_27 wheel): ai-edge-litert ships 2_27 only.
KAGGLE_TARGET = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
                 "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_27_x86_64",
                 "--platform", "manylinux2014_x86_64", "--platform", "any"]
SLUG = "kagglekit-wheels"
TITLE = "kagglekit wheels"
REQUIREMENTS = Path("requirements.txt")
GPU_REQUIREMENTS = Path("setup/gpu-requirements.txt")  # never installed here: wheels for GPU kernels
# vLLM and what it needs beyond the image (vllmwheels.py writes it): a kernel naming "vllm" in its "wheels"
# gets all of them, installed in a folder of their own that only the engine's process reads.
ENGINE = "vllm"
ENGINE_LOCK = Path("setup/vllm-gpu-lock.txt")


class WheelError(RuntimeError):
    """An extra package cannot be pinned or fetched."""


def pinned(package: str, requirements: Path = REQUIREMENTS, gpu_only: Path = GPU_REQUIREMENTS) -> str:
    """``package``'s exact version in requirements.txt, else in the GPU-only pins (names
    compared as pip does)."""
    for path in (requirements, gpu_only):
        if path.exists() and normal_name(package) in pins_in(path):
            return pins_in(path)[normal_name(package)]
    raise WheelError(f"{package!r} (a notebook's \"wheels\") is not pinned with == in {requirements} "
                     f"(or {gpu_only} for a GPU-only package): pin it there, so that Kaggle runs the "
                     "version the tests ran")


def pins_in(path: Path) -> dict[str, str]:
    """Every ``name==version`` line of ``path`` (names as pip normalises them)."""
    found = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)", line)
        if m:
            found[normal_name(m.group(1))] = m.group(2)
    return found


def kernel_wheels(names: list[str], lock: Path = ENGINE_LOCK) -> tuple[dict[str, str], dict[str, str]]:
    """A kernel's "wheels" as the install cell finds them: ({package: wheel file prefix} for the notebook's
    Python, the same for the engine's folder: vLLM's lock when ``names`` holds vllm, else empty)."""
    extras = {name: wheel_name(name, pinned(name)) for name in names if normal_name(name) != ENGINE}
    if ENGINE not in {normal_name(name) for name in names}:
        return extras, {}
    if not lock.exists():
        raise WheelError(f"{lock} is missing: `make vllm-lock` writes it (vLLM's wheels for a Kaggle kernel)")
    return extras, {name: wheel_name(name, version) for name, version in pins_in(lock).items()}


def normal_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(package: str, version: str) -> str:
    """The file name prefix of a wheel (``torch_geometric-2.8.1-``)."""
    return f"{re.sub(r'[-.]+', '_', package)}-{version}-"


def _wheels_of(folder: Path, package: str, version: str) -> list[Path]:
    """The wheels of ``package==version`` in ``folder`` (names as pip normalises them:
    ``MarkupSafe-3.0.2-...`` is markupsafe's)."""
    prefix = wheel_name(package, version).lower()
    return sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix))


def target_of(python: Path | str) -> list[str]:
    """pip's target options for the interpreter ``python`` (the sandbox's, which is not Kaggle's
    3.12: a compiled wheel for 3.12 does not install there)."""
    tag = subprocess.run([str(python), "-c", "import sys; print(f'{sys.version_info[0]}{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return ["--python-version", f"{tag[0]}.{tag[1:]}", "--implementation", "cp", "--abi", f"cp{tag}",
            *KAGGLE_TARGET[KAGGLE_TARGET.index("--platform"):]]


def fetch(packages: list[str], folder: Path, target: list[str] = KAGGLE_TARGET,
          versions: dict[str, str] | None = None) -> dict[str, Path]:
    """Each package's pinned wheel (``versions``' where given) for Kaggle's interpreter (``target``) in
    ``folder`` (pure-Python or manylinux, no dependencies: the image has those); already there, it is not
    fetched again."""
    folder.mkdir(parents=True, exist_ok=True)
    found = {}
    for package in packages:
        version = (versions or {}).get(package) or pinned(package)
        have = _wheels_of(folder, package, version)
        if not have:
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                   "--only-binary=:all:", *target, "-d", str(folder),
                                   f"{package}=={version}"],
                                  capture_output=True, text=True)
            have = _wheels_of(folder, package, version)
            if done.returncode != 0 or not have:
                raise WheelError(f"could not fetch the wheel of {package}=={version}:\n"
                                 f"{done.stderr.strip()[-1500:]}")
        found[package] = have[0]
    return found


def build_dataset(folder: Path, owner: str, kit_wheel: Path, packages: list[str],
                  target: list[str] = KAGGLE_TARGET) -> Path:
    """``folder`` as a Kaggle dataset: the kit's wheel, the extras' wheels (for ``target``), its metadata."""
    import shutil
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("kagglekit-*.whl"):
        old.unlink()
    shutil.copy2(kit_wheel, folder / kit_wheel.name)
    fetch([p for p in packages if normal_name(p) != ENGINE], folder, target)
    if ENGINE in {normal_name(p) for p in packages}:  # vLLM's own versions, beside the notebook's
        engine = pins_in(ENGINE_LOCK)
        fetch(list(engine), folder, target, versions=engine)
    (folder / "dataset-metadata.json").write_text(json.dumps(
        {"title": TITLE, "id": f"{owner}/{SLUG}", "licenses": [{"name": "other"}],
         "description": "Wheels kagglekit notebooks install offline (make push keeps it)."},
        indent=2) + "\n")
    return folder


def manifest(folder: Path) -> dict:
    """Every wheel's content digest: what the dataset's current version must hold. The
    files inside, not the zip's bytes: a rebuilt wheel of the same code has new
    timestamps, and must not make a new dataset version."""
    import zipfile
    digests = {}
    for path in sorted(folder.glob("*.whl")):
        h = hashlib.sha256()
        with zipfile.ZipFile(path) as z:
            for name in sorted(z.namelist()):
                h.update(name.encode() + b"\0" + z.read(name))
        digests[path.name] = h.hexdigest()
    return digests


def publish(folder: Path, owner: str, message: str, timeout_s: float = 600) -> str:
    """Create or version ``<owner>/kagglekit-wheels`` from ``folder`` (unless Kaggle already
    has these exact wheels) and wait until it is ready; what was done, in words."""
    return publish_folder(folder, f"{owner}/{SLUG}", manifest(folder), message, timeout_s)


def publish_folder(folder: Path, ref: str, wanted: dict, message: str, timeout_s: float = 600,
                   dir_mode: str = "skip", record: Path | None = None) -> str:
    """Create or version the dataset ``ref`` from ``folder`` with the real kaggle CLI, unless its
    last upload had the very content ``wanted`` (a digest per file); wait until it is ready.
    ``dir_mode`` "zip": each sub-folder uploaded as an archive, which Kaggle unpacks. ``record``:
    where that content is remembered (default ``<folder>/.published.json``)."""
    from .kaggle_cli import KaggleError, run_cli
    record = record or folder / ".published.json"
    try:
        run_cli("datasets", "status", ref)
        exists = True
    except KaggleError:
        exists = False
    if exists and record.exists() and json.loads(record.read_text()) == wanted:
        return f"{ref}: unchanged"
    import tempfile
    # The CLI keeps resumable-upload state under $TMPDIR/.kaggle: ours, removed afterwards.
    with tempfile.TemporaryDirectory(prefix="kagglekit-upload-") as tmp:
        if exists:
            out = run_cli("datasets", "version", "-p", str(folder), "-m", message, "--dir-mode",
                          dir_mode, env={"TMPDIR": tmp})
        else:
            out = run_cli("datasets", "create", "-p", str(folder), "--dir-mode", dir_mode,
                          env={"TMPDIR": tmp})
    refused = re.search(r"creation error: (.*)", out)  # the CLI says so, yet exits 0
    if refused:
        raise KaggleError(f"Kaggle refused the dataset {ref}: {refused.group(1).strip()}")
    _wait_ready(ref, timeout_s)
    record.write_text(json.dumps(wanted))
    return f"{ref}: {'new version' if exists else 'created'}"


def _wait_ready(ref: str, timeout_s: float) -> None:
    from .kaggle_cli import KaggleError, run_cli
    deadline = time.monotonic() + timeout_s
    while True:
        status = run_cli("datasets", "status", ref).strip().splitlines()[-1].strip().lower()
        if status == "ready":
            return
        if status in ("failed", "deleted") or time.monotonic() > deadline:
            raise KaggleError(f"dataset {ref} is {status!r}, not ready: the kernels that attach it "
                              "would start without their wheels")
        time.sleep(5)
