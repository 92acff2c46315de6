"""Weights published by ``make publish``, checked before a kernel predicts with them.

Competitors train in one kernel and predict in another: the inference kernel of a code
competition runs offline, within the competition's limit, with the weights attached as a
dataset. ``make publish`` uploads a finished run's checkpoints (the optimizer's state left out)
in the layout the kit's checkpoints have, so the notebook's own ``run.checkpoints(...)`` finds
them in the inputs, in either of Kaggle's mount layouts; beside them ``kagglekit-manifest.json``:
the sha256 of every file, the run's config and headline, where it came from.

``verify_inputs()`` checks every attached publication against its manifest: a file changed,
missing or added after publishing is refused by name before any prediction is made.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import atomic

MANIFEST = "kagglekit-manifest.json"


class TamperedError(ValueError):
    """A published file differs from its manifest."""


def digests(folder: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``folder`` but the manifest, the
    dataset's own metadata (Kaggle's, not the run's) and hidden files (the upload's records)."""
    return {p.relative_to(folder).as_posix(): atomic.sha256_file(p) for p in sorted(Path(folder).rglob("*"))
            if p.is_file() and p.name not in (MANIFEST, "dataset-metadata.json") and not p.name.startswith(".")}


def write_manifest(folder: Path, **about) -> dict:
    """The manifest of ``folder`` as it is now, with ``about`` (config, headline, source)."""
    manifest = {"files": digests(folder), **about}
    atomic.write_json(Path(folder) / MANIFEST, manifest)
    return manifest


def verify(folder: Path) -> dict:
    """``folder``'s manifest, once every file it lists has its recorded sha256 (and no other
    file is there); a difference raises TamperedError naming the file."""
    folder = Path(folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    found, listed = digests(folder), manifest["files"]
    for name, digest in listed.items():
        if name not in found:
            raise TamperedError(f"{folder / name}: listed in {MANIFEST} but missing: the publication is "
                                "incomplete; make publish again")
        if found[name] != digest:
            raise TamperedError(f"{folder / name}: its sha256 differs from {MANIFEST} (changed after make "
                                "publish): refusing to predict with it; make publish again")
    extra = sorted(set(found) - set(listed))
    if extra:
        raise TamperedError(f"{folder / extra[0]}: not in {MANIFEST} (added after make publish): refusing "
                            "to predict with it; make publish again")
    return manifest


def verify_inputs() -> list[dict]:
    """Every publication attached to this kernel (any input layout), verified: what each holds."""
    from ..machine import env
    checked = []
    for manifest in env.find_inputs(MANIFEST):
        about = verify(manifest.parent)
        checked.append({"folder": str(manifest.parent), "files": len(about["files"]),
                        "source": about.get("source"), "headline": about.get("headline")})
        print(f"published weights verified: {manifest.parent} ({len(about['files'])} files, "
              f"from {about.get('source', '?')})")
    return checked


def published_metrics() -> dict:
    """The metrics.json published beside the attached weights (the training run's record, e.g. the
    model it chose to submit); {} when no publication carries one."""
    from ..machine import env
    for manifest in env.find_inputs(MANIFEST):
        path = manifest.parent / "metrics.json"
        if path.is_file():
            return json.loads(path.read_text())
    return {}
