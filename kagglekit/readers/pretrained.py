"""A pretrained model attached to a kernel: found where Kaggle mounts it, named by its identity.

Code competitions run with the internet off, so a model comes attached: a Kaggle Model
(``model_sources: owner/model/framework/variation/N``) or a dataset holding a
``save_pretrained`` folder. Kaggle mounts a Kaggle Model at
``/kaggle/input/models/<owner>/<model>/<framework>/<variation>/<N>`` (since 2026) or at the older
``/kaggle/input/<model>/<framework>/<variation>/<N>``; a dataset at
``/kaggle/input/datasets/<owner>/<slug>`` or ``/kaggle/input/<slug>``, the model's files often one
folder down. ``find_model_dir`` accepts a folder, a Kaggle Model handle (with or without its
version) or a dataset's ``owner/slug``, in either layout, and returns the folder holding
``config.json`` (at most three folders below; several models there are refused, naming them);
it never downloads.

``base_identity``: what makes two bases the same model (its config and the sha256 of each
weight file), for checkpoints that hold only what trains: resumed onto another base they would
be adapters of a model they never saw.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath

from ..state import atomic

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


class ModelDirError(FileNotFoundError):
    """The model is not where the parameter says."""


SEARCH_DEPTH = 3  # a model's files: the folder itself, or up to three below (<N>/, a subfolder)


def _with_config(folder: Path) -> Path | None:
    """``folder`` when it holds config.json, else the one folder at most ``SEARCH_DEPTH`` below
    that does: the shallowest, the newest version among version folders (``<N>``). Several
    models side by side, and a folder far deeper, are not guesses to make: refused by name."""
    if (folder / "config.json").is_file():
        return folder
    found = []
    for depth in range(1, SEARCH_DEPTH + 1):
        found = sorted(p.parent for p in folder.glob("/".join(["*"] * depth) + "/config.json") if p.is_file())
        if found:
            break
    if not found:
        return None
    if len(found) > 1 and not all(p.name.isdigit() and p.parent == found[0].parent for p in found):
        raise ModelDirError(f"model_dir={str(folder)!r} holds {len(found)} models: "
                            f"{', '.join(str(p) for p in found[:6])}{' ...' if len(found) > 6 else ''}. "
                            "Name the one to use (its folder, or its Kaggle Model handle with the version)")
    return max(found, key=_version)


def _version(folder: Path) -> int:
    return int(folder.name) if folder.name.isdigit() else -1


def _candidates(handle: str, roots: list[Path]) -> list[Path]:
    """Where Kaggle mounts ``owner/model/framework/variation[/N]`` or ``owner/slug``."""
    parts = PurePosixPath(handle).parts
    out = []
    for root in roots:
        if len(parts) >= 4:  # a Kaggle Model handle
            owner, model, *rest = parts
            out += [root / "models" / owner / model / Path(*rest), root / model / Path(*rest)]
        elif len(parts) == 2:  # a dataset (or a Kaggle Model named owner/model)
            owner, slug = parts
            out += [root / "datasets" / owner / slug, root / "models" / owner / slug, root / slug]
        elif len(parts) == 1:
            out += [root / parts[0]]
    return out


def find_model_dir(value: str, roots: list[Path]) -> Path:
    """The folder holding the model's ``config.json`` (see the module's docstring)."""
    if not value:
        raise ModelDirError("model_dir is empty: give a folder, a Kaggle Model handle "
                            "(owner/model/framework/variation/N) or a dataset's owner/slug")
    path = Path(value).expanduser()
    tried = [path] if path.is_absolute() or path.exists() else _candidates(value, roots)
    for folder in tried:
        found = _with_config(folder) if folder.is_dir() else None
        if found is not None:
            return found
    where = ", ".join(str(t) for t in tried[:4]) or "nowhere"
    raise ModelDirError(
        f"model_dir={value!r}: no config.json in {where} or up to {SEARCH_DEPTH} folders below. Attach the "
        "model to the kernel (model_sources: owner/model/framework/variation/N in kernel-metadata, or the "
        "dataset holding its save_pretrained folder in dataset_sources); code competitions run "
        "offline, so nothing is downloaded.")


def weight_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())


def base_identity(folder: Path | str) -> dict:
    """``{"config": sha256 of config.json's content, "weights": {file: sha256}}`` of a model
    folder: equal for the same base model wherever it is mounted."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("_name_or_path", None)  # where it was saved from, not what it is
    text = json.dumps(config, sort_keys=True)
    files = weight_files(folder)
    if not files:
        raise ModelDirError(f"{folder} holds config.json but no weight file ({', '.join(WEIGHT_SUFFIXES)})")
    return {"config": hashlib.sha256(text.encode()).hexdigest()[:16],
            "weights": {p.name: atomic.sha256_file(p)[:16] for p in files}}


def weight_bytes(folder: Path | str) -> int:
    return sum(p.stat().st_size for p in weight_files(Path(folder)))


def quiet_transformers() -> None:
    """transformers' load reports ("classifier.weight | MISSING": the new head, as intended)
    and per-file progress bars carry nothing for the user; ``V=1`` keeps them."""
    if os.environ.get("KAGGLEKIT_VERBOSE"):
        return
    from transformers.utils import logging
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    # AutoRound, loading a quantised model, advises other backends: read when it is first imported, set here if it was
    os.environ.setdefault("AR_LOG_LEVEL", "ERROR")
    import logging as std_logging
    std_logging.getLogger("autoround").setLevel(os.environ["AR_LOG_LEVEL"])


def defaults_for(pretrained: bool, given: dict[str, float], defaults: dict[str, tuple[float, float]],
                 verbose: bool = True) -> dict[str, float]:
    """``given``'s values, each left at 0 replaced by its default for the model attached:
    ``defaults[name] = (for a pretrained body, for a random start)``: a pretrained body is adjusted
    at a gentler rate than a random start learns at, its new head learned faster than its body
    (benchmarks/RESULTS.md measures both notebooks' choices). What was chosen is printed; a value
    the user gave is kept as given."""
    start = "a pretrained body" if pretrained else "a random start"
    chosen = {name: (value or defaults[name][0 if pretrained else 1]) for name, value in given.items()}
    picked = [f"{name}={chosen[name]:g}" for name, value in given.items() if not value]
    if picked and verbose:
        print(f"kagglekit: {', '.join(picked)}: the defaults for {start} (give a value to choose another)", flush=True)
    return chosen
