"""The GPU check's set-up: the bundle verified and installed, the children's environment, the
image's versions and their drift, and the dry run's imports and smoke."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VERSIONS = ("torch", "transformers", "torch_geometric", "peft", "accelerate", "numpy", "optuna",
            "lightgbm", "xgboost", "papermill", "ipykernel", "pandas", "sklearn")


class BundleError(RuntimeError):
    """The bundle is missing, incomplete or altered: rebuild it with make gpu-bundle."""


def sha256(path: Path) -> str:
    """The file's sha256, read in 1 MiB blocks (standard library only: runs before any install)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verified(bundle: Path) -> list[Path]:
    """The bundle's wheels, each checked against the manifest's sha256."""
    try:
        manifest = json.loads((bundle / "manifest.json").read_text())
    except OSError:
        raise BundleError(f"{bundle} has no manifest.json: run `make gpu-bundle` first") from None
    wheels = []
    for entry in manifest["wheels"]:
        path = bundle / entry["file"]
        if not path.exists() or sha256(path) != entry["sha256"]:
            raise BundleError(f"{entry['file']} is missing or altered in {bundle}: run `make gpu-bundle` again")
        wheels.append(path)
    return wheels


def fits_the_device(wheel: Path) -> bool:
    """Does one of the wheel's tags fit CPython 3.12 on manylinux x86-64: pure Python, cp312, or
    the stable ABI of an earlier 3.x?"""
    from packaging.utils import parse_wheel_filename

    def fits(t) -> bool:
        if t.platform != "any" and not (t.platform.startswith("manylinux") and t.platform.endswith("x86_64")):
            return False
        if t.abi == "abi3":
            return t.interpreter.startswith("cp3") and int(t.interpreter[3:]) <= 12
        if t.abi == "none":
            return t.interpreter.startswith("py3") or t.interpreter == "cp312"
        return (t.interpreter, t.abi) == ("cp312", "cp312")
    return any(fits(t) for t in parse_wheel_filename(wheel.name)[3])


def installable_here(wheel: Path) -> bool:
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename
    here = set(sys_tags())
    return any(t in here for t in parse_wheel_filename(wheel.name)[3])


def install(bundle: Path, target: Path, dry_run: bool) -> dict:
    """The bundle into ``target`` (no index, no dependencies resolved: the manifest is the list);
    what this interpreter cannot install is checked by its tags."""
    wheels = verified(bundle)
    wrong = [w.name for w in wheels if not fits_the_device(w)]
    if wrong:
        raise BundleError(f"not for CPython 3.12 on manylinux x86-64: {', '.join(wrong)}")
    here = [w for w in wheels if installable_here(w)]
    if not dry_run and len(here) < len(wheels):
        raise BundleError(f"this interpreter cannot install {len(wheels) - len(here)} of the bundle's wheels "
                          f"(Python {sys.version.split()[0]}; the bundle is for 3.12)")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                           "--no-compile", "--disable-pip-version-check", "--target", str(target),
                           *map(str, here)], capture_output=True, text=True)
    if done.returncode:
        raise BundleError(f"pip could not install the bundle: {done.stderr.strip()[-800:]}")
    _kernelspec(target)
    return {"installed": len(here), "checked_by_tag": len(wheels) - len(here),
            "bytes": sum(w.stat().st_size for w in wheels)}


def _kernelspec(target: Path) -> None:
    """papermill's "python3" kernel: this interpreter, with the bundle on its path."""
    spec = target / "share" / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (gpu check)", "language": "python"}))


def child_env(target: Path) -> dict:
    paths = [str(target), str(REPO), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "JUPYTER_PATH": str(target / "share" / "jupyter"),
            "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}


_VERSIONS = """
import importlib, json, sys
found = {"python": sys.version.split()[0]}
for name in %r:
    try:
        found[name] = importlib.import_module(name).__version__
    except Exception as err:
        found[name] = f"missing ({type(err).__name__})"
import torch
found.update(cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
if found["cuda_available"]:
    found["device"] = torch.cuda.get_device_name(0)
    try:
        import pynvml
        pynvml.nvmlInit()
        found["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as err:
        found["driver"] = f"unknown ({type(err).__name__})"
print(json.dumps(found))
"""


def versions(env: dict) -> dict:
    """The versions the checks run with, and where they differ from requirements.txt's pins."""
    done = subprocess.run([sys.executable, "-c", _VERSIONS % (VERSIONS,)], env=env, capture_output=True,
                          text=True, timeout=180)
    if done.returncode:
        raise RuntimeError(f"could not read the versions: {done.stderr.strip()[-800:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", (REPO / "requirements.txt").read_text(), re.M))
    names = {"torch_geometric": "torch-geometric", "sklearn": "scikit-learn", "xgboost": "xgboost-cpu"}
    drift = {}
    for module in VERSIONS:
        pin = pins.get(names.get(module, module))
        if pin and str(found.get(module)).split("+")[0] != pin:
            drift[module] = (found.get(module), pin)
    return {"versions": found, "drift": drift}


def notebook_imports(repo: Path) -> list[str]:
    """Every top-level module the notebooks import."""
    found = set()
    for path in sorted((repo / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.add(node.module.split(".")[0])
    return sorted(found | {"papermill", "ipykernel", "optuna", "lightgbm", "xgboost", "kagglesdk"})


_IMPORTS = """
import importlib, importlib.metadata, json, sys
bad = []
for m in sys.argv[1:]:
    try:
        importlib.import_module(m)
    except Exception as e:
        bad.append(f"{m}: {type(e).__name__}: {e}")
try:  # the kit runs the kaggle CLI as a program: importing it asks for credentials
    importlib.metadata.version("kaggle")
except importlib.metadata.PackageNotFoundError:
    bad.append("kaggle: not installed")
print(json.dumps(bad))
"""


def dry_run(env: dict, repo: Path, notebook: str = "quickstart") -> dict:
    """Every notebook's imports, then one notebook's smoke on the CPU, with the bundle first."""
    modules = notebook_imports(repo)
    done = subprocess.run([sys.executable, "-c", _IMPORTS, *modules], env=env, capture_output=True, text=True,
                          timeout=300)
    failed = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else [done.stderr[-400:]]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-check-dry-") as out:
        smoke = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "run", notebook, "-p", "smoke=True",
                                "--output", out], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    ok = not failed and smoke.returncode == 0
    return {"ok": ok, "imports": len(modules), "failed_imports": failed, "notebook": notebook,
            "seconds": round(time.monotonic() - started, 1),
            **({} if smoke.returncode == 0 else {"tail": (smoke.stdout + smoke.stderr).strip().splitlines()[-8:]})}
