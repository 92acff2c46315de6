"""``make compare NB=``: a local run against the Kaggle run of the same configuration.

Judged by the write-up's criteria (``comparison.CRITERIA``, a notebook's own under ``criteria``
in its kernel metadata), one verdict each, printed and written to compare.md. Only like with
like: the local run compared is one whose parameters equal the Kaggle run's (``make run
NB=<name> KAGGLE=1`` makes it); without one the comparison is refused, naming the parameters
that differ, instead of blaming the platform for a configuration's effect.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from . import comparison as report, metadata


def _local_runs(folder: Path) -> list[dict]:
    runs = []
    for path in sorted(folder.glob("*/metrics.json")):
        if path.parent.is_symlink():  # `latest` is one of the others
            continue
        runs.append(json.loads(path.read_text()))
    return runs


def compare_notebook(name: str, runs_root: Path) -> bool:
    """Print the comparison of notebook ``name`` and write compare.md beside the Kaggle run."""
    meta = metadata.load(Path("kernel-metadata") / f"{name}.json")
    remote_files = sorted((runs_root / "kaggle" / meta["slug"]).glob("*/metrics.json"),
                          key=lambda p: p.stat().st_mtime)
    # make run writes a metadata variant's runs (gnn_elliptic) under its notebook's name
    local_runs = _local_runs(runs_root / meta.get("notebook", name))
    if not remote_files or not local_runs:
        print(f"{name}: need a local run (make run NB={name} KAGGLE=1) and a downloaded Kaggle run "
              f"(make output NB={name})", file=sys.stderr)
        return False
    remote = json.loads(remote_files[-1].read_text())
    wanted = remote.get("config", {})
    differences = [report.config_differences(run.get("config", {}), wanted) for run in local_runs]
    matching = [run for run, diff in zip(local_runs, differences) if not diff]
    if not matching:
        closest = min(differences, key=len)
        print(f"{name}: refused: no local run has the Kaggle run's configuration; the closest "
              f"differs in {'; '.join(closest)}. Run `make run NB={name} KAGGLE=1` to make one.",
              file=sys.stderr)
        return False
    result = report.compare(matching[-1], remote, meta.get("criteria"))
    path = report.write(result, remote_files[-1].parent, f"{name}: local vs Kaggle")
    print(path.read_text())
    return result["ok"]
