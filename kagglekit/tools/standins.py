"""Stand-ins for competition data in the sandbox: the competition's exact file layout with
synthetic content. The real files mount on Kaggle only after the rules are accepted on the
website and never reach this machine; what the sandbox checks is that the notebook reads
that layout, with its Kaggle parameters, version after version."""
from __future__ import annotations

from pathlib import Path


class NoStandIn(LookupError):
    """A competition the sandbox cannot stand in for."""


def vesuvius(folder: Path) -> Path:
    """Surface-detection layout (uint8 TIFF chunks of two shapes, labels 0 / 1 / 2, test
    volumes without labels, one compressed). 96^3 test volumes: one window of the Kaggle
    patch each, so CPU inference stays short."""
    from ..readers.volumes import write_synthetic
    return write_synthetic(folder, [96, 112, 96, 96], [96, 96], seed=7)


STAND_INS = {"vesuvius-challenge-surface-detection": vesuvius}


def make(slug: str, folder: Path) -> Path:
    """The stand-in for competition ``slug`` written to ``folder`` (once)."""
    if slug not in STAND_INS:
        raise NoStandIn(f"the sandbox has no stand-in for competition {slug!r}: add a writer of its "
                        "layout to kagglekit/tools/standins.py (STAND_INS)")
    if not (folder / ".complete").exists():
        STAND_INS[slug](folder)
        (folder / ".complete").write_text("")
    return folder
