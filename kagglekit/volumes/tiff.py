"""3-D TIFF volumes read by crop, whatever their compression.

A volume is a stack of z pages (y by x). Uncompressed, tifffile memory-maps it and a crop
reads only its own bytes. Compressed (the Vesuvius chunks are LZW), every page a crop
touches must be decoded whole: a 96-deep crop of a 320^3 chunk decodes 96 pages of
320 x 320, unless a ``volumecache.VolumeCache`` decoded the volume once. tifffile decodes LZW
only through the optional ``imagecodecs`` package, which Kaggle's image lacks; Pillow, which it
has, decodes LZW (and Deflate, PackBits) too, and is used whenever tifffile cannot.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


class TiffVolume:
    """A 3-D TIFF (z pages of y-by-x) read by crop; ``cache``: a ``VolumeCache`` that decodes
    a compressed volume once (None: decode the pages of every crop)."""

    def __init__(self, path: Path | str, cache=None, labels_map=None):
        import tifffile
        self.path = Path(path)
        with tifffile.TiffFile(self.path) as tif:
            series = tif.series[0]
            self.shape, self.dtype = tuple(series.shape), series.dtype
            self.compression = tif.pages[0].compression.name  # type: ignore[attr-defined]  # a TiffPage's COMPRESSION
        if len(self.shape) != 3:
            raise ValueError(f"{self.path} holds an array of shape {self.shape}, not a 3-D volume")
        self.cache, self.labels_map = cache, labels_map
        self._mapped = None
        try:
            self._mapped = tifffile.memmap(self.path, mode="r")
        except ValueError:  # compressed or tiled: decoded (through the cache when given)
            pass

    @property
    def nbytes(self) -> int:
        """Bytes of the whole volume decoded."""
        return int(np.prod(self.shape)) * self.dtype.itemsize

    @property
    def decoder(self) -> str:
        """What reads this file: "memmap", "tifffile", or "pillow" (LZW without imagecodecs)."""
        if self._mapped is not None:
            return "memmap"
        return "tifffile" if _tifffile_decodes(self.compression) else "pillow"

    def _array(self):
        """An array-like of the whole volume, sliced without reading the rest: the file's
        memory map, or the cache's, or None (decode the crop's pages)."""
        if self._mapped is not None:
            return self._mapped
        return self.cache.mapped(self) if self.cache is not None else None

    def crop(self, corner, size) -> np.ndarray:
        """The ``size`` cube (or box) at ``corner`` (z, y, x), as a fresh array."""
        (z, y, x), (d, h, w) = corner, (size,) * 3 if np.isscalar(size) else size
        whole = self._array()
        if whole is not None:
            out = np.array(whole[z:z + d, y:y + h, x:x + w])
        else:
            out = decode_pages(self.path, range(z, z + d), self.compression)[:, y:y + h, x:x + w]
        return self.labels_map(out) if self.labels_map is not None else out

    def read(self) -> np.ndarray:
        """The whole volume in its own dtype (uint8: a 320^3 chunk is 33 MB)."""
        return self.crop((0, 0, 0), self.shape)


def _tifffile_decodes(compression: str) -> bool:
    if compression in ("NONE", "ADOBE_DEFLATE", "DEFLATE", "PACKBITS"):
        return True  # zlib and PackBits are built into tifffile
    try:
        import imagecodecs  # noqa: F401
    except ImportError:
        return False
    return True


def decode_pages(path: Path, pages, compression: str) -> np.ndarray:
    """Pages ``pages`` of a TIFF stack as one (z, y, x) array: tifffile where it can decode
    the compression, else Pillow (which decodes LZW without imagecodecs)."""
    pages = list(pages)
    if _tifffile_decodes(compression):
        import tifffile
        with tifffile.TiffFile(path) as tif:
            return np.stack([tif.pages[i].asarray() for i in pages])
    from PIL import Image
    with Image.open(path) as image:
        out = []
        for i in pages:
            image.seek(i)
            out.append(np.asarray(image))
    return np.stack(out)


def write_volume(path: Path | str, volume: np.ndarray, compress: str | bool | None = None) -> Path:
    """A 3-D array as a TIFF of z pages, atomically. ``compress``: None, "zlib" or True (tifffile),
    or "lzw" (written by Pillow, as the competition's files are LZW-compressed)."""
    import tifffile

    from ..state import atomic
    path = Path(path)
    volume = np.ascontiguousarray(volume)
    with atomic.atomic_path(path) as tmp:
        if compress == "lzw":
            from PIL import Image
            pages = [Image.fromarray(page) for page in volume]
            pages[0].save(tmp, format="TIFF", save_all=True, append_images=pages[1:],
                          compression="tiff_lzw")
        else:
            tifffile.imwrite(tmp, volume, photometric="minisblack",  # z pages, never RGB
                             compression="zlib" if compress else None)
    return path
