"""``make publish NB=<name>``: a finished run's weights as a private dataset version, for inference kernels.

The run: ``RUN=`` names its folder; by default the newest version ``make output`` fetched whose
run finished, else the newest local run (``runs/<name>/latest``). What is published, in the
kit's own checkpoint layout so that the notebook's ``run.checkpoints(...)`` finds it in either
input layout: each training's finished checkpoint with its optimizer, scheduler, scaler and RNG
state left out (``OPTIMIZER=1`` keeps them: only a run that goes on training needs them), its
sidecar, the run's metrics.json, and ``kagglekit-manifest.json`` (``state.published``: the sha256
of every file, the run's config and headline, where it came from). Uploaded as
``<owner>/<kernel slug>-weights`` with the real kaggle CLI (sub-folders as archives, which
Kaggle unpacks); a kernel whose metadata says ``"weights_from": "<name>"`` attaches it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from ...state import atomic, published
from ...state.checkpoint import Found, load, scan
from ..runfolders import fetched_versions
from . import credentials, metadata, wheels
from .layout import weights_folder, weights_slug

PREDICTS_WITH = ("model", "model_part")  # what restoring weights reads; the rest continues a training
EXPORT = "model"  # a run's model exported for the engines (text_generation's output folder model/)


class PublishError(ValueError):
    """Nothing publishable: no finished run, or a run without a finished training."""


def _finished(folder: Path) -> bool:
    metrics = folder / "metrics.json"
    return metrics.exists() and bool(json.loads(metrics.read_text()).get("summary"))


def source_run(name: str, meta: dict, runs: Path = Path("runs")) -> Path:
    """The newest fetched Kaggle version that finished, else the newest local run."""
    local = runs / meta.get("notebook", name) / "latest"
    for folder in [*reversed(fetched_versions(runs / "kaggle" / meta["slug"])), local]:
        if _finished(folder):
            return folder
    raise PublishError(f"no finished run of {name}: make output NB={name} (a Kaggle version) or "
                       f"make run NB={name} first, or name one with RUN=<folder>")


def _final(folder: Path) -> Found | None:
    finals = [f for f in scan(folder) if f.meta.get("final")]
    return max(finals, key=lambda f: f.step) if finals else None


def collect(run: Path, out: Path, optimizer: bool = False, required: bool = True) -> list[str]:
    """Each training's finished checkpoint of ``run`` into ``out`` (same relative layout); none is
    refused when ``required`` (a run that exported its model publishes that alone if need be)."""
    copied = []
    for identity in sorted(p for p in (run / "checkpoints").glob("*/*") if p.is_dir()):
        found = _final(identity)
        if found is None:
            continue
        state = load(found)  # verified against its sidecar, weights_only
        kept = state if optimizer else {k: v for k, v in state.items() if k in PREDICTS_WITH}
        target = out / found.path.relative_to(run)
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic.atomic_path(target) as tmp, open(tmp, "wb") as out_file:
            torch.save(kept, out_file)  # through a file object: the archive is not named after the temp file,
            # so the same weights publish to the same bytes and an unchanged publication is not uploaded again
        atomic.write_json(target.with_suffix(".json"), {**found.meta, "sha256": atomic.sha256_file(target),
                                                        "published": {"optimizer_state": optimizer}})
        copied.append(str(target.relative_to(out)))
    if not copied and required:
        raise PublishError(f"{run}/checkpoints holds no finished training: publish a run whose "
                           "training ran to its end")
    return copied


def carry_choices(run: Path, out: Path) -> list[str]:
    """The run's JSON cache entries (choices made on validation data, such as the segmentation's
    threshold): an inference kernel reads no label and must find them where the cache looks."""
    carried = []
    for meta in sorted(run.glob("cache/*/*/meta.json")):
        if json.loads(meta.read_text()).get("kind") == "json":
            shutil.copytree(meta.parent, out / meta.parent.relative_to(run))
            carried.append(str(meta.parent.relative_to(run)))
    return carried


def carry_export(run: Path, out: Path) -> list[str]:
    """The run's model exported for the LLM engines (``model/``: ``kk.sft.export``'s fp16
    transformers folder), as it is: an inference kernel attaching the publication gives its folder
    as ``model_dir`` (``pretrained.find_model_dir`` finds the ``config.json`` inside)."""
    exported = run / EXPORT
    if not (exported / "config.json").is_file():
        return []
    shutil.copytree(exported, out / EXPORT)
    return sorted(str(p.relative_to(out)) for p in (out / EXPORT).rglob("*") if p.is_file())


def assemble(name: str, run: Path, optimizer: bool = False) -> tuple[Path, dict]:
    """The publication's folder, rebuilt from ``run``: checkpoints, metrics.json, manifest."""
    meta = metadata.load(Path("kernel-metadata") / f"{name}.json")
    out = weights_folder(meta)
    shutil.rmtree(out, ignore_errors=True)  # ours alone: rebuilt from the run every time
    out.mkdir(parents=True)
    exported = carry_export(run, out)
    files = collect(run, out, optimizer, required=not exported) + carry_choices(run, out)
    shutil.copyfile(run / "metrics.json", out / "metrics.json")
    metrics = json.loads((run / "metrics.json").read_text())
    fetched = run / "kaggle.json"
    source = (f"Kaggle kernel {meta['slug']} version {json.loads(fetched.read_text())['version']}"
              if fetched.exists() else f"local run {run.resolve()}")
    manifest = published.write_manifest(out, config=metrics.get("config", {}), headline=metrics.get("summary"),
                                        source=source, notebook=meta.get("notebook", name),
                                        optimizer_state=optimizer, base_models=meta.get("model_sources", []))
    print(f"{out}: {len(files)} checkpoint(s) from {source} ({'with' if optimizer else 'without'} "
          "optimizer state)" + (f", and the model exported for the engines ({EXPORT}/)" if exported else ""))
    return out, manifest


def publish(name: str, run: str = "", optimizer: bool = False, message: str = "") -> str:
    """Assemble and upload ``name``'s weights; what was done, in words."""
    owner = credentials.username()  # before any work: publishing needs an account
    meta = metadata.load(Path("kernel-metadata") / f"{name}.json")
    folder, manifest = assemble(name, Path(run) if run else source_run(name, meta), optimizer)
    ref = f"{owner}/{weights_slug(meta)}"
    (folder / "dataset-metadata.json").write_text(json.dumps(
        {"title": f"{meta['title']} weights", "id": ref, "licenses": [{"name": "other"}],
         "description": f"make publish NB={name}: {manifest['source']}"}, indent=2) + "\n")
    return wheels.publish_folder(folder, ref, manifest["files"], message or f"make publish: {manifest['source']}",
                                 dir_mode="zip", record=folder.with_name(f"{folder.name}.dataset.json"))  # beside:
    # the folder is rebuilt every time, and a record inside it would never say "unchanged"
