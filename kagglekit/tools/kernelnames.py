"""Notebook and kernel names as the command line takes them (``NB=``): a notebook of notebooks/, or a
variant of kernel-metadata/ (another kernel of a notebook: other data, other parameters)."""
from __future__ import annotations

import json
from pathlib import Path

NOTEBOOKS = Path("notebooks")


def notebooks(names: list[str]) -> list[Path]:
    if not names:
        return sorted(NOTEBOOKS.glob("*.ipynb"))
    paths = []
    for name in names:
        path = NOTEBOOKS / f"{Path(name).stem}.ipynb"
        if not path.exists():
            known = ", ".join(p.stem for p in sorted(NOTEBOOKS.glob("*.ipynb")))
            several = f'; NB takes names separated by spaces: NB="{" ".join(name.split(","))}"' if "," in name else ""
            raise SystemExit(f"no notebook named {name!r} in {NOTEBOOKS}/ (known: {known}){several}")
        paths.append(path)
    return paths


def kernels(names: list[str]) -> list[tuple[str, Path]]:
    """(kernel name, notebook) for each name: a notebook's, or a variant's in kernel-metadata/
    (another kernel of a notebook, e.g. gnn_elliptic: other data, other parameters)."""
    found = []
    for name in names:
        variant = Path("kernel-metadata") / f"{name}.json"
        if not (NOTEBOOKS / f"{Path(name).stem}.ipynb").exists() and variant.exists():
            notebook = json.loads(variant.read_text()).get("notebook", name)
            found.append((name, NOTEBOOKS / f"{notebook}.ipynb"))
        else:
            found.extend((nb.stem, nb) for nb in notebooks([name]))
    return found or [(nb.stem, nb) for nb in notebooks([])]


def kaggle_parameters(name: str) -> dict:
    """The parameters notebook ``name`` runs with on Kaggle (kernel-metadata/<name>.json)."""
    from .publish import metadata
    return metadata.load(Path("kernel-metadata") / f"{name}.json").get("parameters", {})


def names(args) -> list[str]:
    return [name for name, _ in kernels(args.notebooks)]
