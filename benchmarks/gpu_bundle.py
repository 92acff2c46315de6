"""`make gpu-bundle`: the wheels a lent GPU's image lacks, ready to travel with the working tree.

The lent machine has no network: a session lent one for 15 minutes must spend them measuring,
not installing. This resolves `setup/gpu-bundle.txt` for that machine (CPython 3.12, manylinux,
x86-64, binary wheels only), constrained to the versions of the project's venv (what the suite
tested), drops what the image already has (`setup/gpu-image.txt`), downloads the rest into
`--out` (`.gpu-bundle/`, ignored by git) and writes `manifest.json`: each wheel's name, version,
file, size and sha256, what the image provides instead, and the total. Over 56 MiB it fails:
the device carries at most 64 MiB with the working tree.

    python3 benchmarks/gpu_bundle.py --out .gpu-bundle
    python3 benchmarks/gpu_check.py --bundle .gpu-bundle --out <folder>   # on the device
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu_checks.setup import sha256  # the check verifies with the same function

REPO = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 56 * 2**20
TARGET = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3",
          "--abi", "none", "--only-binary=:all:"] + [
    arg for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                    "manylinux2014_x86_64", "manylinux1_x86_64", "any")
    for arg in ("--platform", tag)]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages(path: Path = REPO / "setup" / "gpu-image.txt") -> set[str]:
    lines = [line.split("#", 1)[0] for line in path.read_text().splitlines()]
    return {normalized(name) for line in lines for name in line.split()}


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check"],
                          capture_output=True, text=True)


def _constraints(folder: Path) -> Path:
    """The project venv's versions (what the suite tested), torch and the kit left out."""
    frozen = _pip("freeze", "--exclude-editable").stdout.splitlines()
    keep = [line for line in frozen if "==" in line
            and normalized(line.split("==")[0]) not in ("torch", "kagglekit")]
    path = folder / "constraints.txt"
    path.write_text("\n".join(keep) + "\n")
    return path


def resolve(requirements: Path, work: Path) -> list[dict]:
    """Every distribution the requirements need on the device: (name, version)."""
    report = work / "report.json"
    done = _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                "--target", str(work / "target"), "-c", str(_constraints(work)), *TARGET,
                "-r", str(requirements))
    if done.returncode:
        raise SystemExit(f"gpu-bundle: pip could not resolve {requirements} for CPython 3.12 on "
                         f"manylinux x86-64:\n{done.stderr.strip()[-1500:]}")
    found = json.loads(report.read_text())["install"]
    return [{"name": i["metadata"]["name"], "version": i["metadata"]["version"]} for i in found]


def download(wanted: list[dict], out: Path) -> None:
    specs = [f"{w['name']}=={w['version']}" for w in wanted]
    done = _pip("download", "--no-deps", *TARGET, "-d", str(out), *specs)
    if done.returncode:
        raise SystemExit(f"gpu-bundle: pip could not download the wheels:\n{done.stderr.strip()[-1500:]}")


def manifest(out: Path, wanted: list[dict], provided: list[dict]) -> dict:
    by_name = {normalized(w["name"]): w for w in wanted}
    wheels = []
    for path in sorted(out.glob("*.whl")):
        name = normalized(path.name.split("-")[0])
        entry = by_name.get(name, {"name": name, "version": path.name.split("-")[1]})
        wheels.append({**entry, "file": path.name, "bytes": path.stat().st_size, "sha256": sha256(path)})
    total = sum(w["bytes"] for w in wheels)
    return {"python": "cp312", "platform": "manylinux x86_64", "wheels": wheels, "bytes": total,
            "limit_bytes": LIMIT_BYTES, "provided_by_the_image": provided}


def build(out: Path, requirements: Path = REPO / "setup" / "gpu-bundle.txt") -> dict:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="gpu-bundle-") as work:
        needed = resolve(requirements, Path(work))
    have = image_packages()
    wanted = [n for n in needed if normalized(n["name"]) not in have]
    provided = [n for n in needed if normalized(n["name"]) in have]
    download(wanted, out)
    found = manifest(out, wanted, provided)
    (out / "manifest.json").write_text(json.dumps(found, indent=1) + "\n")
    if found["bytes"] > LIMIT_BYTES:
        raise SystemExit(f"gpu-bundle: {found['bytes'] / 2**20:.1f} MiB is over the "
                         f"{LIMIT_BYTES / 2**20:.0f} MiB the device can carry beside the tree")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / ".gpu-bundle"))
    args = ap.parse_args()
    found = build(Path(args.out))
    print(f"gpu-bundle: {len(found['wheels'])} wheels, {found['bytes'] / 2**20:.1f} MiB in {args.out} "
          f"({len(found['provided_by_the_image'])} more come from the device's image)")
    for w in found["wheels"]:
        print(f"  {w['file']:<70} {w['bytes'] / 2**20:6.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
