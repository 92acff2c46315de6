"""What the sandbox asks of each version of a kernel: version 1 may train; a later one resumes,
skips or hits the cache for everything an earlier one finished (``verdict``), and Kaggle's scoring
rerun trains nothing but what the submitted version planned (``rerun_verdict``). A version whose
output carries what the one before carried, byte for byte (``carries_the_same``), has shown the
chain's fixed point: the next would mount what it mounted.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..state.atomic import sha256_file
from ..submit import rerunplan

# What every version writes afresh and the kit never reads back from a previous version's output
# (it reads caches, checkpoints, folds' splits, studies and manifests: env.find_inputs' callers):
# the run's record, the ranks' logs, the submission (a zip's times differ), the executed notebook,
# the plots (a fit skipped has no step times to draw) and lock files. Anything else is compared,
# so a file no one listed can only make version 3 run.
FRESH = ("metrics.json", "logs/", "submission.")
FRESH_KINDS = (".lock", ".png")


def verdict(version: int, chain: dict, previous: dict | None = None) -> tuple[bool, str]:
    """Version 1 may train; a later version must resume, skip or hit the cache for everything an
    earlier version finished, and may only train what no version has finished yet (the folds a
    budget left for it: "pending" in the previous chain)."""
    groups: dict[str, list[str]] = {}
    for label, did in chain.items():
        groups.setdefault(did, []).append(label)
    text = "; ".join(f"{did}: {', '.join(labels)}" for did, labels in sorted(groups.items()))
    earlier = previous or {}
    retrained = [label for label in groups.get("trained", []) + groups.get("computed", [])
                 if version > 1 and not _left_pending(label, earlier)]
    if retrained:
        return False, f"FAILED: trained again from scratch: {', '.join(retrained)} ({text})"
    return True, f"ok ({text or 'no fits'})"


def _left_pending(label: str, earlier: dict) -> bool:
    """Was ``label`` left for this version: pending itself, or a unit of a pending fold (its
    models, named by their fold: ``cache:trees-fold2-seed0`` of ``cache:gnn-fold2``) that no
    earlier version reached? Anything an earlier version recorded otherwise was finished there."""
    if label in earlier:
        return earlier[label] == "pending"
    folds = {m.group(0) for p, did in earlier.items() if did == "pending"
             for m in [re.search(r"fold\d+$", p)] if m}
    return any(re.search(rf"(^|[-:]){fold}($|-)", label) for fold in folds)


def chain_of(output: Path | None) -> dict:
    try:
        return json.loads((output / "metrics.json").read_text()).get("chain", {}) if output else {}
    except (OSError, ValueError):
        return {}


def carries_the_same(earlier: Path, later: Path) -> bool:
    """Does ``later`` (a version's output) hold exactly the files ``earlier`` held, byte for
    byte, apart from what every version writes afresh (``FRESH``, the executed notebook)? Then
    the version after ``later``, mounting it, sees what ``later`` saw when it mounted ``earlier``."""
    files = _carried(earlier)
    if files != _carried(later):
        return False
    return all(sha256_file(earlier / name) == sha256_file(later / name) for name in files)


def _carried(output: Path) -> dict[str, int]:
    """Each file a next version could read back: its size, by its path under ``output``."""
    found = {}
    for path in sorted(p for p in output.rglob("*") if p.is_file()):
        name = path.relative_to(output).as_posix()
        if not (name.startswith(FRESH) or path.suffix in FRESH_KINDS or (path.suffix == ".ipynb" and "/" not in name)):
            found[name] = path.stat().st_size
    return found


def rerun_verdict(metrics: dict, root: Path, owner: str) -> tuple[bool, str]:
    """Kaggle's scoring rerun trains nothing but what the submitted version planned (test-time
    training: its ``rerun_plan``), predicts no validation volume and decodes no label: it reads
    the hidden test set only, and its submission holds every hidden id."""
    chain = metrics.get("chain", {})
    planned = {f"cache:{name}" for name in rerunplan.training(_submitted_plan(root, owner))}  # predictions license none
    trained = [label for label, did in chain.items() if did in ("trained", "resumed", "computed")
               and label not in planned and not (planned and label == "fit")]
    if trained:
        return False, f"FAILED: the scoring rerun trained: {', '.join(trained)}"
    within = sorted(label for label in planned if chain.get(label) == "computed")
    if metrics.get("predicted", {}).get("val") or (root / "working" / "predictions" / "val").exists():
        return False, "FAILED: the scoring rerun predicted validation volumes"
    test_ids = set(metrics.get("submission", {}).get("test_ids") or [])
    decoded = {p.name.rsplit("-", 1)[0] for p in (root / "temp").rglob("*.npy")}
    if decoded - test_ids:
        return False, f"FAILED: the scoring rerun read other volumes: {sorted(decoded - test_ids)[:4]}"
    if not (root / "working" / "submission.zip").exists() and not (root / "working" / "submission.csv").exists():
        return False, "FAILED: the scoring rerun wrote no submission"
    predicted = len(test_ids) or metrics.get("submission", {}).get("rows", 0)
    volumes = f", {len(decoded)} volumes decoded, all of them test volumes" if decoded else ""
    trained_text = f"trained {', '.join(within)} as planned" if within else "nothing trained"
    return True, f"ok (scoring rerun: {predicted} hidden test rows predicted, {trained_text}{volumes})"


def _submitted_plan(root: Path, owner: str) -> dict:
    """The rerun plan the version's own output recorded (mounted under input/notebooks/)."""
    for found in sorted((root / "input" / "notebooks").glob(f"{owner}/*/metrics.json")):
        return json.loads(found.read_text()).get("rerun_plan") or {}
    return {}
