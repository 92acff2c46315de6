"""The Vesuvius Surface Detection layout, as the competition really ships it.

``train.csv`` (columns ``id,scroll_id``) and ``test.csv`` list the chunks;
``train_images/<id>.tif`` are uint8 CT chunks (320^3 mostly, some 256^3 and 384^3),
``train_labels/<id>.tif`` their labels (0 background, 1 surface, 2 unlabelled: in no loss and
no score), ``test_images/<id>.tif`` the public test chunk (one; a scoring rerun replaces the
folder with the hidden set). What the real files hold that a tidy copy would not:

- the volumes are LZW-compressed TIFF stacks (``tiff``: tifffile decodes LZW only with
  imagecodecs, which Kaggle's image lacks; Pillow decodes it there);
- after a data update ``train.csv`` lists ids whose files moved to
  ``deprecated_train_images/`` and ``deprecated_train_labels/`` (old binary labels). They are
  skipped, counted and named once (``VesuviusLayout.skipped``), or used with their labels
  mapped to 0 / 1 when asked (``deprecated=True``).

Volumes are read by crop (``tiff.TiffVolume``), through a ``VolumeCache`` that decodes each
compressed volume once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..readers import filecheck, tablecheck
from .tiff import TiffVolume, write_volume  # noqa: F401 (kk.volumes.*)
from .volumecache import VolumeCache  # noqa: F401 (kk.volumes.VolumeCache)

IGNORE = 2  # the competition's "unlabelled" voxels: in no loss and no score
DEPRECATED = "deprecated_"  # prefix of the folders an update moved old chunks to


def binary_labels(crop: np.ndarray) -> np.ndarray:
    """Old binary labels (0 background, anything else surface) as 0 / 1."""
    return (crop > 0).astype(np.uint8)


@dataclass
class VesuviusLayout:
    """The files of one competition folder (either ``/kaggle/input`` layout).

    ``train_ids``: the chunks with an image and a label; ``skipped``: id -> why it is not used;
    ``scroll``: id -> scroll id (for splits that keep a scroll whole); ``cache``: decodes
    compressed volumes once (None: every crop decodes its pages)."""
    root: Path
    train_ids: list
    test_ids: list
    test_root: Path
    skipped: dict = field(default_factory=dict)
    scroll: dict = field(default_factory=dict)
    deprecated: set = field(default_factory=set)  # train ids read from deprecated_* folders
    cache: VolumeCache | None = None

    def _folder(self, vid: str, part: str) -> Path:
        return self.root / (DEPRECATED + part if vid in self.deprecated else part)

    def image(self, vid: str) -> TiffVolume:
        return TiffVolume(self._folder(vid, "train_images") / f"{vid}.tif", self.cache)

    def label(self, vid: str) -> TiffVolume:
        mapped = binary_labels if vid in self.deprecated else None
        return TiffVolume(self._folder(vid, "train_labels") / f"{vid}.tif", self.cache, mapped)

    def test_image(self, vid: str) -> TiffVolume:
        return TiffVolume(self.test_root / "test_images" / f"{vid}.tif", self.cache)

    def files(self, ids: list) -> list[Path]:
        """The image and label files of ``ids`` (what a training on them depends on)."""
        return [self._folder(v, part) / f"{v}.tif" for v in ids
                for part in ("train_images", "train_labels")]

    def describe_skipped(self) -> str:
        """One line for the notebook: how many listed ids have no volume, and why."""
        if not self.skipped:
            return "every id of train.csv has its image and label"
        moved = [v for v, why in self.skipped.items() if why.startswith("in deprecated")]
        listed = len(self.train_ids) + len(self.skipped)
        text = (f"{len(self.skipped)} of {listed} ids in train.csv skipped: {len(moved)} moved to "
                f"deprecated_train_images/ (deprecated=True trains on them, labels mapped to 0/1), "
                f"{len(self.skipped) - len(moved)} with no file at all")
        return text + f"; e.g. {', '.join(list(self.skipped)[:3])}"


class VolumeDataError(FileNotFoundError):
    """The folder is not the Vesuvius layout, or the files the submission needs are missing or unreadable."""


def _table(csv: Path):
    import pandas as pd
    table = pd.read_csv(csv, dtype=str)
    if "id" not in table.columns:
        table = table.rename(columns={table.columns[0]: "id"})
    return table


def _test_ids(folder: Path) -> list[str]:
    """Ids of ``test.csv`` when present, else of the files in ``test_images/`` (the hidden
    test set of a scoring rerun replaces the folder)."""
    if (folder / "test.csv").exists():
        return _table(folder / "test.csv")["id"].tolist()
    return sorted(p.stem for p in (folder / "test_images").glob("*.tif"))


def _train_ids(root: Path, ids: list, deprecated: bool) -> tuple[list, dict, set]:
    """(usable ids, skipped id -> reason, ids read from deprecated_* folders)."""
    usable, skipped, old = [], {}, set()

    def present(prefix: str, vid: str) -> bool:
        return all((root / f"{prefix}{part}" / f"{vid}.tif").exists()
                   for part in ("train_images", "train_labels"))
    for vid in ids:
        if present("", vid):
            usable.append(vid)
        elif present(DEPRECATED, vid):
            if deprecated:
                usable.append(vid)
                old.add(vid)
            else:
                skipped[vid] = "in deprecated_train_images/ (old binary labels)"
        else:
            skipped[vid] = "no image or label file"
    files = [root / f"{DEPRECATED if v in old else ''}{part}" / f"{v}.tif" for v in usable
             for part in ("train_images", "train_labels")]
    for i, why in filecheck.problems(files, filecheck.tiff_problem).items():
        vid = files[i].stem
        if vid in usable:
            usable.remove(vid)
            skipped[vid] = f"{files[i].parent.name}/{files[i].name} unreadable: {why}"
    return usable, skipped, old


def read_layout(folder: Path | str, test_folder: Path | str | None = None, *,
                deprecated: bool = False, cache: VolumeCache | None = None) -> VesuviusLayout:
    """The layout under ``folder``; test volumes from ``test_folder`` when given (another
    ``test_images/``, for an inference-only run). Ids of ``train.csv`` without files are
    skipped and listed in ``skipped`` (``deprecated=True``: those in ``deprecated_*`` are used);
    a test id without its volume raises FileNotFoundError naming it."""
    folder = Path(folder)
    found = sorted(folder.rglob("train.csv"))
    if not found:
        raise VolumeDataError(f"{folder} holds no train.csv: expected the Vesuvius layout "
                                "(train.csv, train_images/, train_labels/, test_images/)")
    root = found[0].parent
    test_root = Path(test_folder) if test_folder else root
    if test_folder and not (test_root / "test_images").is_dir():
        nested = sorted(test_root.rglob("test_images"))
        test_root = nested[0].parent if nested else test_root
    table = _table(root / "train.csv")
    usable, skipped, old = _train_ids(root, table["id"].tolist(), deprecated)
    if not usable:
        raise VolumeDataError(f"none of the {len(table)} ids of {root / 'train.csv'} has its "
                                "image in train_images/ and label in train_labels/")
    scroll = dict(zip(table["id"], table["scroll_id"])) if "scroll_id" in table else {}
    layout = VesuviusLayout(root, usable, _test_ids(test_root), test_root, skipped, scroll,
                            old, cache)
    _check_test_files(layout)
    return layout


def _check_test_files(layout: VesuviusLayout) -> None:
    """Every test id once, each with a readable volume: the submission needs every one."""
    import pandas as pd
    tablecheck.check_ids(pd.DataFrame({"id": layout.test_ids}), None, "id", VolumeDataError, "test.csv")
    folder = layout.test_root / "test_images"
    missing = [v for v in layout.test_ids if not (folder / f"{v}.tif").exists()]
    if missing:
        raise VolumeDataError(f"test ids without a volume in {folder}: {missing[:5]}: the submission needs a mask for "
                              "each. Use the competition's own test_images/ (or test_dir)")
    paths = [folder / f"{v}.tif" for v in layout.test_ids]
    filecheck.refuse_test_files(paths, filecheck.problems(paths, filecheck.tiff_problem), VolumeDataError,
                                "test volumes")


def write_layout(folder: Path | str, train: dict, test: dict, compress=None,
                 scrolls: dict | None = None) -> Path:
    """Write volumes in the competition's layout: ``train`` maps id -> (image, label),
    ``test`` maps id -> image (uint8 arrays); ``compress``: None, "zlib" or "lzw";
    ``scrolls``: id -> scroll id (``train.csv``'s second column)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for vid, (image, label) in train.items():
        write_volume(folder / "train_images" / f"{vid}.tif", image, compress)
        write_volume(folder / "train_labels" / f"{vid}.tif", label, compress)
    for vid, image in test.items():
        write_volume(folder / "test_images" / f"{vid}.tif", image, compress)
    scrolls = scrolls or {}
    (folder / "train.csv").write_text("id,scroll_id\n" + "".join(
        f"{v},{scrolls.get(v, 1)}\n" for v in train))
    if test:
        (folder / "test.csv").write_text("id,scroll_id\n" + "".join(f"{v},{scrolls.get(v, 1)}\n"
                                                                    for v in test))
    return folder


def synthetic_chunk(edge: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A noisy uint8 cube holding thin curved sheets (``datasets.volumes``) and its labels
    (0 / 1, an unlabelled slab of 2 on top)."""
    from ..readers.datasets import volumes
    image, label = volumes(1, edge, seed=seed)
    labels = label[0, 0].numpy()
    labels[: edge // 8] = IGNORE
    return (image[0, 0] * 40 + 100).clamp(0, 255).byte().numpy(), labels


def write_synthetic(folder: Path | str, train_edges: list, test_edges: list, seed: int = 0,
                    prefix: str = "") -> Path:
    """Built-in data in the competition's layout (ids ``<prefix>train000...``,
    ``<prefix>test000...``): the first test volume zlib-compressed, as files may come, the
    others memory-mappable. (``tools/standins.py`` writes the real files' quirks too.)"""
    folder = Path(folder)
    train = {f"{prefix}train{i:03d}": synthetic_chunk(e, seed * 1000 + i)
             for i, e in enumerate(train_edges)}
    test = {f"{prefix}test{i:03d}": synthetic_chunk(e, seed * 1000 + len(train_edges) + i)[0]
            for i, e in enumerate(test_edges)}
    write_layout(folder, train, {})
    for i, (vid, image) in enumerate(test.items()):
        write_volume(folder / "test_images" / f"{vid}.tif", image, compress="zlib" if i == 0 else None)
    (folder / "test.csv").write_text("id,scroll_id\n" + "".join(f"{v},1\n" for v in test))
    return folder
