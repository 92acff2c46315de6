"""The packages a kernel really ran with, recorded in its output.

Kaggle's image moves under a kernel (Python, NumPy, scikit-learn, transformers changed within a
year; docker-python's history), and ``sandbox/kaggle-image.txt`` is read from Kaggle's sources,
not from a run. Each run's metrics.json therefore records, at its summary, the version of every
distribution whose modules it imported, and the image's own build (docker-python writes
``GIT_COMMIT`` and ``BUILD_DATE`` into the environment and /etc): ``make drift`` compares them
with the pins.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


def normalise(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return name.lower().replace("_", "-").replace(".", "-")


def imported() -> dict[str, str]:
    """``{distribution: version}`` of every distribution a module imported in this process
    belongs to."""
    from importlib import metadata
    owners = metadata.packages_distributions()  # top-level module -> distributions
    found = {}
    for module in [m for m in list(sys.modules) if "." not in m]:
        for dist in owners.get(module, []):
            try:
                found[normalise(dist)] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
    return dict(sorted(found.items()))


def image(etc: Path = Path("/etc")) -> dict[str, str]:
    """The image's build, where it says (Kaggle's: its git commit and build date)."""
    out = {}
    for key, name in (("git_commit", "GIT_COMMIT"), ("build_date", "BUILD_DATE")):
        value = os.environ.get(name) or _read(etc / name.lower())
        if value and value != "unknown":
            out[key] = value
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def record() -> dict:
    return {"imported": imported(), "image": image(), "python": sys.version.split()[0]}
