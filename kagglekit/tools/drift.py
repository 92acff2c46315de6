"""``make drift NB=``: the packages a Kaggle run really had against the sandbox's pins.

Each kernel version records the versions of the distributions it imported (``machine.packages``,
metrics.json's ``packages``); ``make output`` brings them back. This prints every pinned package
whose version differs (and the image build the run reported), and with ``--rewrite`` puts the
run's versions into ``sandbox/kaggle-image.txt``, each rewritten pin citing the run it was read
from, so the next sandbox build is the image Kaggle ran. torch is reported but never rewritten:
Kaggle's is a CUDA build these machines cannot install (the file says why).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..machine.packages import normalise
from .runfolders import fetched_versions

IMAGE = Path("sandbox/kaggle-image.txt")
NEVER_REWRITTEN = {"torch"}  # a CUDA build on Kaggle; the sandbox's CPU stand-in stays
ALIASES = {"xgboost-cpu": "xgboost"}  # the sandbox's CPU-only wheel of Kaggle's xgboost
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9_.\-]+)==(?P<version>[^\s#]+)(?P<rest>.*)$")


def pins(text: str) -> dict[str, tuple[int, str]]:
    """``{normalised name: (line index, pinned version)}`` of the image list."""
    out = {}
    for i, line in enumerate(text.splitlines()):
        match = _PIN.match(line.strip())
        if match:
            out[normalise(match["name"])] = (i, match["version"])
    return out


def differences(text: str, ran: dict[str, str]) -> list[dict]:
    """Every pinned package the run imported at another version."""
    out = []
    for name, (line, pinned) in pins(text).items():
        recorded = ran.get(ALIASES.get(name, name))
        if recorded is not None and recorded != pinned:
            out.append({"package": name, "pinned": pinned, "ran": recorded, "line": line,
                        "rewritable": name not in NEVER_REWRITTEN})
    return out


def rewrite(text: str, diffs: list[dict], source: str) -> str:
    """``text`` with each rewritable difference's pin set to the run's version, citing ``source``."""
    lines = text.splitlines()
    for d in diffs:
        if d["rewritable"]:
            pin = _PIN.match(lines[d["line"]].strip())
            assert pin is not None, "a rewritable line is a pin"
            name = pin["name"]
            lines[d["line"]] = f"{name}=={d['ran']}  # [kaggle {source}]"
    return "\n".join(lines) + "\n"


def latest_run(runs_root: Path, slug: str) -> tuple[Path, dict] | None:
    """The newest downloaded version of kernel ``slug`` that recorded its packages."""
    for folder in reversed(fetched_versions(runs_root / "kaggle" / slug)):
        metrics = json.loads((folder / "metrics.json").read_text())
        if metrics.get("packages", {}).get("imported"):
            return folder, metrics
    return None


def report(slug: str, runs_root: Path, image: Path = IMAGE, write: bool = False) -> int:
    """Print the drift of the newest recorded run of ``slug``; rewrite the pins when asked.
    Returns the number of differences (0: the sandbox is the image the run had)."""
    found = latest_run(runs_root, slug)
    if found is None:
        print(f"{slug}: no downloaded run recorded its packages (make output NB=... after a run of "
              "this kit's version)")
        return 0
    folder, metrics = found
    source = f"{slug} {folder.name}"
    text = image.read_text()
    diffs = differences(text, metrics["packages"]["imported"])
    build = metrics["packages"].get("image") or {}
    print(f"{source}: Python {metrics['packages'].get('python', '?')}, image "
          f"{build.get('git_commit', 'not reported')[:12]} built {build.get('build_date', '?')}")
    for d in diffs:
        note = "" if d["rewritable"] else " (not rewritten: Kaggle's is a CUDA build; the sandbox keeps its CPU torch)"
        print(f"  {d['package']}: pinned {d['pinned']}, Kaggle ran {d['ran']}{note}")
    if not diffs:
        print(f"  no drift: every pinned package it imported is at its pin ({image})")
    if write and any(d["rewritable"] for d in diffs):
        from ..state import atomic
        atomic.write_bytes(image, rewrite(text, diffs, source).encode())
        print(f"  {image} rewritten from {source}: the next sandbox build installs these versions")
    return len(diffs)
