"""The sandbox's kernel environment: the packages of Kaggle's image (``sandbox/kaggle-image.txt``)
in a venv of its own, never the project's and never with the kit installed (the kit reaches a
kernel only embedded in the notebook, as on Kaggle).

``make test`` installs the packages beside the project's own venv (they need neither torch
nor the kit), then links the project's CPU torch in; a file lock makes two test workers or
two ``make sandbox`` build it once.
"""
from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

IMAGE = Path("sandbox/kaggle-image.txt")
# Packages that declare torch as a dependency: pip would install a torch of its own choosing
# (CUDA wheels) before the project's is linked in. Installed --no-deps, after the rest: their
# other dependencies are pinned in the image list.
NEED_TORCH = {"peft", "accelerate", "torchvision", "timm"}
VENV = Path(".sandbox/venv")


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
    later = [p for p in packages if _name(p) in NEED_TORCH]
    # --no-compile: the kernels write bytecode at first import (halves the install time)
    for part, flags in (([p for p in packages if p not in later], []), (later, ["--no-deps"])):
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile",
                               "--disable-pip-version-check", *flags, *part], capture_output=True, text=True)
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
    # Kaggle's torchvision has its compiled ops; beside the stand-in CPU torch they cannot load:
    # made importable as the project's venv is (setup/torchvision_cpu.py says what and why)
    subprocess.run([str(python), "setup/torchvision_cpu.py", str(python)], check=True)
    lacking = subprocess.run([str(python), "-I", "-c", "import importlib.util as u; "
                              "print([m for m in ('torch_geometric', 'kagglekit', 'imagecodecs') if u.find_spec(m)])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if lacking != "[]":
        raise RuntimeError(f"the sandbox kernel environment must not have {lacking}")
    stamp.write_text(wanted)


def _name(requirement: str) -> str:
    return requirement.split("==")[0].strip().lower().replace("_", "-")


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
