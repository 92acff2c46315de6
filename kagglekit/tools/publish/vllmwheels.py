"""The CUDA vLLM a Kaggle T4 kernel runs, resolved against Kaggle's image and locked.

A kernel has no internet, so vLLM and every package it needs that the image lacks (or holds at a version
vLLM refuses) travel in the wheels dataset. They never enter the notebook's own Python: the install cell
puts them in a folder of their own (``vllm-site``) that only the engine's process puts first on its path
(``KAGGLEKIT_VLLM_SITE``; ``kagglekit/llm/vllmbackend.py``), so vLLM's transformers never replaces the
image's in the notebook. The image's torch stack (torch, torchvision, torchaudio) is never shipped: vLLM's
CUDA kernels are built against one torch, pinned ``==`` in its metadata, and that pin must be the image's.

``resolve`` asks pip's own resolver (a dry run with Kaggle's interpreter and platform, the image's torch
stack standing in as empty wheels of its versions), so what is locked is what pip would install there;
``make vllm-lock`` writes ``setup/vllm-gpu-lock.txt``, and ``make push`` fetches from that file.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .wheels import ENGINE_LOCK, KAGGLE_TARGET, WheelError, normal_name, pins_in

IMAGE = Path("sandbox/kaggle-image.txt")
VLLM = "vllm==0.32.0"  # the last vLLM whose CUDA build pins torch==2.13.0, the image's (0.33.0 pins 2.14.0)
TORCH_STACK = ("torch", "torchvision", "torchaudio")  # the image's CUDA builds: never shipped
# Kaggle's image runs Ubuntu 22.04 (glibc 2.35): vLLM's dependencies ship wheels up to manylinux_2_31 and
# pip takes each tag literally, so every one the image admits is listed.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in (35, 34, 31, 28, 27, 17)]
TARGET = KAGGLE_TARGET[:KAGGLE_TARGET.index("--platform")] + [
    option for platform in PLATFORMS + ["manylinux2014_x86_64", "linux_x86_64", "any"]
    for option in ("--platform", platform)]
STANDIN_LABEL = "+kaggleimage"  # a local version: above the index's same release, so pip takes the stand-in


def _pip_report(requirements: list[str], extra: list[str]) -> list[dict]:
    """What pip would install for ``requirements`` on Kaggle's interpreter: each one's metadata and url."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                               "--disable-pip-version-check", "--only-binary=:all:", "--target", f"{tmp}/t",
                               "--report", str(report), *TARGET, *extra, *requirements],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise Unresolvable(f"pip could not resolve {' '.join(requirements)} for Kaggle's image:\n"
                               f"{done.stderr.strip()[-2000:]}", refused_constraints(done.stdout + done.stderr))
        return json.loads(report.read_text())["install"]


class Unresolvable(WheelError):
    """pip found no set of versions; ``constraints``: the constraints its conflict names."""

    def __init__(self, message: str, constraints: set[str]):
        super().__init__(message)
        self.constraints = constraints


def refused_constraints(pip_output: str) -> set[str]:
    return {normal_name(m) for m in re.findall(r"The user requested \(constraint\) ([A-Za-z0-9_.-]+)", pip_output)}


def _exact_pins(requirement: str, names: tuple[str, ...] | None = None) -> dict[str, str]:
    """The packages ``requirement`` pins with ``==`` on Linux (of ``names``, if given), from its metadata alone."""
    meta = _pip_report([requirement], ["--no-deps"])[0]["metadata"]
    pins = {}
    for line in meta.get("requires_dist", []):
        m = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*==\s*([^\s;,]+)\s*(;.*)?$", line)
        if m and "extra ==" not in (m.group(4) or "") and (names is None or normal_name(m.group(1)) in names):
            pins[normal_name(m.group(1))] = m.group(3)
    return pins


def torch_stack(vllm: str = VLLM) -> dict[str, str]:
    """The image's builds vLLM runs on, never shipped: the torch stack ``vllm`` pins, and what that torch pins
    (triton, CUDA's libraries): shadowing any of them would break the image's torch in the engine."""
    required = _exact_pins(vllm, TORCH_STACK)
    return {**_exact_pins(f"torch=={required['torch']}"), **required} if "torch" in required else required


def check_torch(vllm: str, required: dict[str, str], image: dict[str, str]) -> None:
    """Refuse a vLLM whose torch is not the image's, naming both and the fix (its kernels would not load)."""
    if "torch" in required and required["torch"] != image.get("torch"):
        raise WheelError(f"{vllm} requires torch=={required['torch']}, Kaggle's image ({IMAGE}) has torch=="
                         f"{image.get('torch')}: its CUDA kernels would not load there. Pin the vLLM whose "
                         f"metadata pins the image's torch (VLLM in {__name__.replace('.', '/')}.py)")


def _standin_wheel(folder: Path, name: str, version: str) -> str:
    """An empty wheel of ``name`` at ``version`` + the stand-in label: the image's build, to the resolver."""
    full = f"{version}{STANDIN_LABEL}"
    dist = f"{name}-{full}.dist-info"
    path = folder / f"{name}-{full}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {full}\n")
        whl.writestr(f"{dist}/WHEEL",
                     "Wheel-Version: 1.0\nGenerator: kagglekit\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{dist}/RECORD", "")
    return f"{name}=={full}"


def resolve(vllm: str = VLLM, image: Path = IMAGE) -> list[tuple[str, str, str]]:
    """(name, version, wheel file) of every package ``vllm`` needs on Kaggle that the image lacks or holds at a
    version it refuses: the image's own versions are kept wherever vLLM admits them, its torch stack always."""
    pins = pins_in(image)  # the image's packages and versions
    stack = torch_stack(vllm)
    check_torch(vllm, stack, pins)
    keep = {name: version for name, version in pins.items() if name not in stack}
    with tempfile.TemporaryDirectory() as standins:
        fixed = [_standin_wheel(Path(standins), name, version) for name, version in stack.items()]
        for _ in range(len(keep) + 1):  # each try lets go of the image's versions that vLLM refused
            Path(standins, "constraints.txt").write_text("\n".join(
                fixed + [f"{name}=={version}" for name, version in keep.items()]) + "\n")
            try:
                chosen = _pip_report([vllm], ["--find-links", standins, "-c", f"{standins}/constraints.txt"])
                break
            except Unresolvable as err:
                if not err.constraints & set(keep):
                    raise
                keep = {name: version for name, version in keep.items() if name not in err.constraints}
    return sorted((normal_name(item["metadata"]["name"]), item["metadata"]["version"],
                   item["download_info"]["url"].rsplit("/", 1)[-1]) for item in chosen
                  if normal_name(item["metadata"]["name"]) not in stack and
                  pins.get(normal_name(item["metadata"]["name"])) != item["metadata"]["version"])


def write_lock(lock: list[tuple[str, str, str]], vllm: str = VLLM, path: Path = ENGINE_LOCK) -> Path:
    lines = [f"# {vllm} for a Kaggle T4 kernel: what it needs beyond Kaggle's image ({IMAGE}), as pip resolves it",
             "# for CPython 3.12 on manylinux x86-64 with the image's torch stack. Written by `make vllm-lock`",
             "# (kagglekit/tools/publish/vllmwheels.py); `make push` puts these wheels in the wheels dataset for a",
             '# kernel whose "wheels" name vllm, and its install cell puts them in a folder only the engine sees.']
    lines += [f"{name}=={version}  # {wheel}" for name, version, wheel in lock]
    path.write_text("\n".join(lines) + "\n")
    return path


if __name__ == "__main__":
    print(write_lock(resolve()), "written")
