"""Render a notebook for Kaggle: parameters in, the kit embedded, nothing local left.

``build/kaggle/<slug>/`` (``KAGGLEKIT_BUILD``) receives ``<slug>.ipynb`` and ``kernel-metadata.json``.
Parameters are injected with papermill's prepare-only mode (nothing executes);
the kit travels as its wheel, base64 in a hidden first cell that installs it
offline into a private folder put first on ``sys.path`` (the image's torch and
packages are never touched, and internet may stay off).
"""
from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ...llm import vllmbackend
from . import credentials, metadata, wheels
from .layout import build_root

MAX_SOURCE_BYTES = 1_000_000  # Kaggle refuses a larger notebook (HTTP 400)
INSTALL_MARK = "# kagglekit: embedded wheel"


class BuildError(RuntimeError):
    """The notebook could not be rendered within Kaggle's limits."""


PACKAGED = ("kagglekit", "pyproject.toml", "README.md")
TOOLING = Path("kagglekit/tools")  # runs here, never in a kernel: left out of the embedded wheel


def _sources() -> tuple[list[Path], bool]:
    """(files the wheel is built from, whether any of them is untracked).

    What git knows of (tracked, or new and not ignored), never leftovers of an earlier
    build: setuptools' in-tree build/lib would carry a module deleted since. The tooling
    wing (``kagglekit/tools``) stays out: the runtime never imports it."""
    files, untracked = _known_files()
    return [p for p in files if TOOLING not in p.parents], untracked


def _known_files() -> tuple[list[Path], bool]:
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True)
    tracked = git("ls-files", "--cached", "--", *PACKAGED)
    if tracked.returncode != 0:  # not a git checkout: the package as it is on disk
        files = [p for p in Path("kagglekit").rglob("*.py")] + [Path("pyproject.toml"), Path("README.md")]
        return [p for p in files if p.exists()], False
    new = git("ls-files", "--others", "--exclude-standard", "--", *PACKAGED).stdout.split()
    files = [Path(p) for p in tracked.stdout.split() + new]
    return [p for p in files if p.is_file()], bool(new)


def build_wheel(out_dir: Path) -> tuple[Path, bool]:
    """The kit's wheel, built offline in a temporary copy of its sources (the checkout
    stays untouched); returns (wheel, whether untracked files went into it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("kagglekit-*.whl"):
        old.unlink()
    files, untracked = _sources()
    with tempfile.TemporaryDirectory(prefix="kagglekit-wheel-") as tmp:
        for path in files:
            (Path(tmp) / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, Path(tmp) / path)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--no-build-isolation", "-w", str(out_dir.resolve()), tmp], check=True)
    return next(out_dir.glob("kagglekit-*.whl")), untracked


def git_state() -> dict:
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"commit": commit, "dirty": dirty}


EXPECTED_GPUS = {"NvidiaTeslaT4": "2:T4"}  # machine_shape -> "count:name" the run must see


def install_cell(wheel: Path, provenance: dict, machine_shape: str = "NvidiaTeslaT4",
                 extras: dict | None = None, owner: str = "", engine: dict | None = None) -> dict:
    """The hidden first cell: the embedded kit, then ``extras`` ({package: wheel file
    prefix}) from the attached wheels dataset, or an error naming what is missing; ``engine``
    (vLLM's lock) the same way into a folder of its own that only the engine's process reads."""
    payload = base64.b64encode(wheel.read_bytes()).decode()
    expect = EXPECTED_GPUS.get(machine_shape, "")
    commit = provenance["commit"][:12] + (" +dirty" if provenance["dirty"] else "")
    source = f'''{INSTALL_MARK} {wheel.name} (commit {commit})
# Installed offline into a private folder: the image's torch is never touched.
import base64, os, subprocess, sys, tempfile
_dir = tempfile.mkdtemp(prefix="kagglekit-")
_whl = os.path.join(_dir, "{wheel.name}")
with open(_whl, "wb") as _f:
    _f.write(base64.b64decode("{payload}"))
_wheels = [_whl]
''' + (_extras_source(extras, owner) if extras else "") \
        + (_engine_source(engine, owner) if engine else "") + f'''# One pip for all (each costs a second of start-up).
# Bytecode is compiled for what is imported, when it is (not all of onnx's).
_installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                             "--no-compile", "--target", os.path.join(_dir, "site"), *_wheels],
                            check=True)  # assigned: a cell's last value is printed, paths and all
sys.path.insert(0, os.path.join(_dir, "site"))
os.environ["KAGGLEKIT_EXPECT_GPUS"] = "{expect}"  # kk.start() checks the GPUs Kaggle gave
'''
    # Hidden in Kaggle's viewer (_kg_hide-input) and in JupyterLab (source_hidden).
    return {"cell_type": "code", "execution_count": None, "outputs": [], "source": source,
            "metadata": {"_kg_hide-input": True, "jupyter": {"source_hidden": True},
                         "tags": ["kagglekit-install"]}}


def _extras_source(extras: dict, owner: str) -> str:
    """Install what Kaggle's image lacks from the wheels dataset, in either /kaggle/input
    layout; fail here, naming the package and the fix, before any work."""
    return f"# Packages Kaggle's image lacks: from the attached dataset {owner}/kagglekit-wheels.\n" \
        + _found_source(extras, owner) + "_wheels += [hits[0] for hits in _found.values()]\n"


def _engine_source(engine: dict, owner: str) -> str:
    """vLLM and its own versions of what it needs, from the same dataset, into ``vllm-site``: the engine's
    process puts it first on its path (kagglekit/llm/vllmbackend.py), the notebook's never does."""
    return "# vLLM for the engines: its own versions (transformers among them), read by their processes only.\n" \
        + _found_source(engine, owner) + f'''_engine_site = os.path.join(_dir, "vllm-site")
subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                "--target", _engine_site, *(hits[0] for hits in _found.values())], check=True)
os.environ["{vllmbackend.SITE_ENV}"] = _engine_site
'''


def _found_source(wanted: dict, owner: str) -> str:
    """``_found``: each wanted package's wheels in the attached dataset; an error naming every one missing."""
    return f'''import glob
_inputs = os.path.join(os.environ.get("KAGGLEKIT_ROOT", "/kaggle"), "input")  # a simulated root in tests
_wanted = {wanted!r}
_found = {{name: sorted(glob.glob(os.path.join(_inputs, "datasets", "*", "kagglekit-wheels", prefix + "*.whl"))
                        + glob.glob(os.path.join(_inputs, "kagglekit-wheels", prefix + "*.whl")))
          for name, prefix in _wanted.items()}}
_missing = [f"{{name}} (a wheel {{_wanted[name]}}*.whl)" for name, hits in _found.items() if not hits]
if _missing:
    raise ModuleNotFoundError(
        f"{{', '.join(_missing)}}: not in Kaggle's image, and no attached input holds its wheel. "
        "Attach the dataset {owner}/kagglekit-wheels (make push creates it and attaches it to "
        "every notebook that needs it), or turn the kernel's internet on and pip install it.") from None
'''


def render(notebook: Path, params: dict, wheel: Path, out: Path,
           machine_shape: str = "NvidiaTeslaT4", untracked: bool = False,
           extras: dict | None = None, owner: str = "", engine: dict | None = None) -> dict:
    """Inject ``params`` (papermill prepare-only), strip local traces, embed the wheel."""
    import papermill

    from ..borrow import filled_copy
    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / notebook.name
        source = filled_copy(notebook, Path(tmp))  # another pipeline's model cells, if it borrows
        papermill.execute_notebook(str(source), str(prepared), parameters=params,
                                   prepare_only=True, kernel_name="python3", progress_bar=False)
        nb = json.loads(prepared.read_text())
    nb["metadata"].pop("papermill", None)
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("papermill", None)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    provenance = {**git_state(), "version": _version()}
    provenance["dirty"] = provenance["dirty"] or untracked  # new files went into the wheel
    cell = install_cell(wheel, provenance, machine_shape, extras, owner, engine)
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):
        cell["id"] = "kagglekit-install"  # nbformat 4.5 requires an id on every cell
    nb["cells"].insert(0, cell)
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}
    nb["metadata"]["kagglekit"] = provenance
    text = json.dumps(nb, indent=1)
    if len(text.encode()) > MAX_SOURCE_BYTES:
        raise BuildError(f"{out} would be {len(text.encode()):,} bytes; Kaggle refuses notebooks "
                         f"over {MAX_SOURCE_BYTES:,}: strip outputs or large literals")
    out.write_text(text)
    return provenance


def _version() -> str:
    from ...machine.version import __version__
    return __version__


PLACEHOLDER_OWNER = "your-kaggle-username"  # a local build without credentials; push fills it


def build(name: str, *, metadata_dir=Path("kernel-metadata"), notebooks_dir=Path("notebooks"),
          out_root: Path | None = None, wheel: Path | None = None,
          overrides: dict | None = None, owner: str | None = None) -> Path:
    """Validate, then write ``<build root>/<slug>/`` for notebook ``name``; returns the folder.

    ``owner``: the Kaggle user the kernel belongs to (default: from the credentials, or
    a placeholder when there are none: a local build needs no account).
    ``overrides`` replace some of the metadata's Kaggle parameters (e.g. a smoke run).
    """
    meta = metadata.load(Path(metadata_dir) / f"{name}.json", Path(notebooks_dir))
    owner = owner or _owner_or_placeholder()
    out_root = Path(out_root) if out_root else build_root()
    out = out_root / meta["slug"]
    out.mkdir(parents=True, exist_ok=True)
    untracked = False
    if wheel is None:
        wheel, untracked = build_wheel(out_root / "_wheel")
    code_file = f"{meta['slug']}.ipynb"
    notebook = Path(notebooks_dir) / f"{meta.get('notebook', name)}.ipynb"
    extras, engine = wheels.kernel_wheels(meta.get("wheels", []))
    params = {**meta.get("parameters", {}), **_criteria(meta, notebook), **(overrides or {})}
    render(notebook, params, wheel, out / code_file,
           meta["machine_shape"], untracked, extras, owner, engine)
    (out / "kernel-metadata.json").write_text(
        json.dumps(metadata.kaggle_metadata(meta, owner, code_file), indent=2) + "\n")
    _refuse_secrets(out)
    return out


def _criteria(meta: dict, notebook: Path) -> dict:
    """The metadata's criteria as the notebook's ``criteria`` parameter (JSON), for a notebook
    that judges itself (``gpu_figures``); make compare's own keys stay in the metadata."""
    from ..notebook_runner import declared_parameters
    if "criteria" not in meta or "criteria" not in declared_parameters(notebook):
        return {}
    from ...studies.figures import TARGETS
    return {"criteria": json.dumps({k: v for k, v in meta["criteria"].items() if k in dict(TARGETS)})}


def _owner_or_placeholder() -> str:
    try:
        return credentials.username()
    except credentials.CredentialsError:
        print(f"kagglekit build: no Kaggle credentials; the kernel id uses the placeholder "
              f"{PLACEHOLDER_OWNER!r} (make push fills in your user name)", file=sys.stderr)
        return PLACEHOLDER_OWNER


def _refuse_secrets(folder: Path) -> None:
    for path in folder.iterdir():
        text = path.read_text(errors="ignore")
        if any(secret in text for secret in credentials.secret_values()):
            path.unlink()
            raise BuildError(f"{path} contained your Kaggle API key and was deleted; "
                             "never put credentials in notebooks or parameters")
