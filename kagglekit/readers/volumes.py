"""3-D volumes on disk, read lazily, and the Vesuvius Surface Detection layout.

The competition ships ``train.csv`` / ``test.csv`` (ids), ``train_images/<id>.tif``
(uint8 CT chunks, 256^3 to 384^3), ``train_labels/<id>.tif`` (0 background, 1 surface,
2 unlabelled) and ``test_images/<id>.tif``. A ``TiffVolume`` reads only the voxels a
crop needs: memory-mapped when the file is stored uncompressed, else the z-pages
of the crop one at a time, so no volume is ever held whole as float32.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

IGNORE = 2  # the competition's "unlabelled" voxels: in no loss and no score


class TiffVolume:
    """A 3-D TIFF (z pages of y-by-x) read by crop."""

    def __init__(self, path: Path | str):
        import tifffile
        self.path = Path(path)
        with tifffile.TiffFile(self.path) as tif:
            series = tif.series[0]
            self.shape, self.dtype = tuple(series.shape), series.dtype
        if len(self.shape) != 3:
            raise ValueError(f"{self.path} holds an array of shape {self.shape}, not a 3-D volume")
        try:
            self._mapped = tifffile.memmap(self.path, mode="r")
        except ValueError:  # compressed or tiled: read the pages a crop needs
            self._mapped = None

    def crop(self, corner, size) -> np.ndarray:
        """The ``size`` cube (or box) at ``corner`` (z, y, x), as a fresh array."""
        (z, y, x), (d, h, w) = corner, (size,) * 3 if np.isscalar(size) else size
        if self._mapped is not None:
            return np.array(self._mapped[z:z + d, y:y + h, x:x + w])
        import tifffile
        with tifffile.TiffFile(self.path) as tif:
            return np.stack([tif.pages[i].asarray()[y:y + h, x:x + w] for i in range(z, z + d)])

    def read(self) -> np.ndarray:
        """The whole volume in its own dtype (uint8: a 320^3 chunk is 33 MB)."""
        return self.crop((0, 0, 0), self.shape)


def write_volume(path: Path | str, volume: np.ndarray, compress: bool = False) -> Path:
    """A 3-D array as a TIFF of z pages (zlib-compressed with ``compress``), atomically."""
    import tifffile

    from ..state import atomic
    path = Path(path)
    with atomic.atomic_path(path) as tmp:
        tifffile.imwrite(tmp, np.ascontiguousarray(volume), photometric="minisblack",
                         compression="zlib" if compress else None)  # z pages, never read as RGB
    return path


@dataclass
class VesuviusLayout:
    """The files of one competition folder (either ``/kaggle/input`` layout)."""
    root: Path
    train_ids: list
    test_ids: list
    test_root: Path

    def image(self, vid: str) -> TiffVolume:
        return TiffVolume(self.root / "train_images" / f"{vid}.tif")

    def label(self, vid: str) -> TiffVolume:
        return TiffVolume(self.root / "train_labels" / f"{vid}.tif")

    def test_image(self, vid: str) -> TiffVolume:
        return TiffVolume(self.test_root / "test_images" / f"{vid}.tif")


def _ids(csv: Path) -> list[str]:
    import pandas as pd
    table = pd.read_csv(csv, dtype=str)
    column = "id" if "id" in table.columns else table.columns[0]
    return table[column].tolist()


def _test_ids(folder: Path) -> list[str]:
    """Ids of ``test.csv`` when present, else of the files in ``test_images/`` (the hidden
    test set of a scoring rerun replaces the folder)."""
    if (folder / "test.csv").exists():
        return _ids(folder / "test.csv")
    return sorted(p.stem for p in (folder / "test_images").glob("*.tif"))


def read_layout(folder: Path | str, test_folder: Path | str | None = None) -> VesuviusLayout:
    """The layout under ``folder``; test volumes from ``test_folder`` when given (another
    ``test_images/``, for an inference-only run). Raises FileNotFoundError naming what
    is missing."""
    folder = Path(folder)
    found = sorted(folder.rglob("train.csv"))
    if not found:
        raise FileNotFoundError(f"{folder} holds no train.csv: expected the Vesuvius layout "
                                "(train.csv, train_images/, train_labels/, test_images/)")
    root = found[0].parent
    test_root = Path(test_folder) if test_folder else root
    if test_folder and not (test_root / "test_images").is_dir():
        nested = sorted(test_root.rglob("test_images"))
        test_root = nested[0].parent if nested else test_root
    layout = VesuviusLayout(root, _ids(root / "train.csv"), _test_ids(test_root), test_root)
    for vid in layout.train_ids:
        for part in ("train_images", "train_labels"):
            if not (root / part / f"{vid}.tif").exists():
                raise FileNotFoundError(f"train.csv lists {vid} but {root / part / vid}.tif is missing")
    missing = [v for v in layout.test_ids if not (test_root / "test_images" / f"{v}.tif").exists()]
    if missing:
        raise FileNotFoundError(f"test ids without a volume in {test_root / 'test_images'}: {missing[:5]}")
    return layout


def write_layout(folder: Path | str, train: dict, test: dict, compress: bool = False) -> Path:
    """Write volumes in the competition's layout: ``train`` maps id -> (image, label),
    ``test`` maps id -> image (uint8 arrays)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for vid, (image, label) in train.items():
        write_volume(folder / "train_images" / f"{vid}.tif", image, compress)
        write_volume(folder / "train_labels" / f"{vid}.tif", label, compress)
    for vid, image in test.items():
        write_volume(folder / "test_images" / f"{vid}.tif", image, compress)
    (folder / "train.csv").write_text("id\n" + "".join(f"{v}\n" for v in train))
    if test:
        (folder / "test.csv").write_text("id\n" + "".join(f"{v}\n" for v in test))
    return folder


def write_synthetic(folder: Path | str, train_edges: list, test_edges: list, seed: int = 0,
                    prefix: str = "") -> Path:
    """Built-in data in the competition's layout: noisy uint8 cubes (edges as given) holding
    thin curved sheets (``datasets.volumes``), labels 0 / 1 with an unlabelled slab (2) on
    top, test volumes without labels; the first test volume zlib-compressed, as files may
    come, the others memory-mappable. Ids ``<prefix>train000...``, ``<prefix>test000...``."""
    from .datasets import volumes

    def chunk(edge: int, index: int):
        image, label = volumes(1, edge, seed=seed * 1000 + index)
        label = label[0, 0].numpy()
        label[: edge // 8] = IGNORE
        return (image[0, 0] * 40 + 100).clamp(0, 255).byte().numpy(), label
    folder = Path(folder)
    train = {f"{prefix}train{i:03d}": chunk(e, i) for i, e in enumerate(train_edges)}
    test = {f"{prefix}test{i:03d}": chunk(e, len(train_edges) + i)[0] for i, e in enumerate(test_edges)}
    write_layout(folder, train, {})
    for i, (vid, image) in enumerate(test.items()):
        write_volume(folder / "test_images" / f"{vid}.tif", image, compress=i == 0)
    (folder / "test.csv").write_text("id\n" + "".join(f"{v}\n" for v in test))
    return folder
