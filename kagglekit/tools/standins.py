"""Stand-ins for competition data in the sandbox: the competition's exact file layout, every
quirk its real files are documented to have, synthetic content.

The real files mount on Kaggle only after the rules are accepted on the website and never
reach this machine (``make data`` fetches a copy of your own, which ``make sandbox DATA=``
mounts instead); the sandbox checks that the notebook reads that layout, with its Kaggle
parameters, version after version, and in the scoring rerun.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


class NoStandIn(LookupError):
    """A competition the sandbox cannot stand in for."""


# Ids and scroll ids shaped like the real ones (ten-digit chunk ids, five-digit scrolls).
TRAIN = [("1004283650", "26002", 96), ("1157445126", "26002", 112), ("2037461925", "34117", 96),
         ("3346244732", "34117", 96)]
MOVED = [("3925240194", "26010", 96), ("4021883011", "26010", 96)]
PUBLIC_TEST = [("1407735", "26002", 96)]
HIDDEN_TEST = [("2290837", "34117", 96), ("3518870", "26010", 112)]


def vesuvius(folder: Path, hidden: bool = False, shrink: int = 1) -> Path:
    """Vesuvius Surface Detection as it ships (competition ``vesuvius-challenge-surface-
    detection``), each part reproducing a documented quirk of the real data:

    - every TIFF stack LZW-compressed (the competition's files are; tifffile cannot decode them
      without imagecodecs, which Kaggle's image lacks), written by Pillow;
    - ``train.csv`` with the real columns ``id,scroll_id`` and ten-digit ids;
    - two of its ids without files in ``train_images/`` and ``train_labels/``: they sit in
      ``deprecated_train_images/`` and ``deprecated_train_labels/`` with binary labels (0 / 1,
      no unlabelled class), as after the competition's data update (806 listed, 786 present);
    - cubic volumes of two edges (the real ones are 320^3, 256^3 and a 384^3; small here so a
      CPU predicts them in seconds), labels 0 / 1 / 2 with an unlabelled slab;
    - a public ``test_images/`` holding one volume, ``test.csv`` listing it;
    - ``hidden=True``: the scoring rerun's folder, where other test volumes (two, of two edges)
      replace the public one.

    ``shrink``: every edge divided by it (the tests' small copy of the same layout).
    """
    from ..readers.volumes import synthetic_chunk, write_layout, write_volume
    train = {vid: synthetic_chunk(edge // shrink, i) for i, (vid, _, edge) in enumerate(TRAIN)}
    tests = HIDDEN_TEST if hidden else PUBLIC_TEST
    test = {vid: synthetic_chunk(edge // shrink, 100 + i)[0] for i, (vid, _, edge) in enumerate(tests)}
    scrolls = {vid: scroll for vid, scroll, _ in TRAIN + MOVED + tests}
    write_layout(folder, train, test, compress="lzw", scrolls=scrolls)
    for i, (vid, _, edge) in enumerate(MOVED):
        image, label = synthetic_chunk(edge // shrink, 50 + i)
        write_volume(folder / "deprecated_train_images" / f"{vid}.tif", image, "lzw")
        write_volume(folder / "deprecated_train_labels" / f"{vid}.tif",
                     (label == 1).astype(np.uint8), "lzw")
    listed = TRAIN[:2] + MOVED + TRAIN[2:]  # the moved ids mid-table, as the update left them
    (folder / "train.csv").write_text("id,scroll_id\n" + "".join(f"{v},{s}\n" for v, s, _ in listed))
    return folder


STAND_INS = {"vesuvius-challenge-surface-detection": vesuvius}


def make(slug: str, folder: Path, hidden: bool = False) -> Path:
    """The stand-in for competition ``slug`` written to ``folder`` (once); ``hidden``: the
    scoring rerun's variant (the hidden test set in place of the public one)."""
    if slug not in STAND_INS:
        raise NoStandIn(f"the sandbox has no stand-in for competition {slug!r}: add a writer of its "
                        "layout to kagglekit/tools/standins.py (STAND_INS), or mount your copy "
                        "of the real files (make data, then make sandbox DATA=data/<slug>)")
    if not (folder / ".complete").exists():
        STAND_INS[slug](folder, hidden=hidden)
        (folder / ".complete").write_text("")
    return folder
