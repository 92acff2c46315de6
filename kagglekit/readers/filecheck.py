"""Every file a competition's ids name, checked cheaply before any is decoded.

One unreadable file used to end a run with its decoder's own error minutes in (a PNG cut short:
PIL's "image file is truncated"; an HTML page saved as ``.ogg``: libsndfile's "Format not
recognised"), while a missing file was dropped with a note. The readers now open each file's
header (and a PNG's or JPEG's last bytes, where a file cut short shows) in threads before any
decoding: a training file that fails is dropped and counted in a note naming the first few and
why; a test file that fails is refused, naming it, because the submission needs every one.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TAIL = 1024  # bytes read from a file's end: a PNG's IEND chunk, a JPEG's end-of-image marker
STRAY = frozenset({".ds_store", "thumbs.db", "desktop.ini", "__macosx", ".ipynb_checkpoints"})


def stray(name: str) -> bool:
    """A file or folder that no competition ships but copies and archives leave beside its files (a
    Mac's .DS_Store and __MACOSX/, Windows' Thumbs.db, AppleDouble ._ files, a README)."""
    lowered = name.lower()
    return lowered in STRAY or lowered.startswith(("._", "readme"))


def image_problem(path: Path) -> str | None:
    """Why the image at ``path`` cannot be decoded, or None: not an image PIL knows, no pixels, or
    a PNG or JPEG cut short (its end chunk or marker missing)."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as image:
            kind, size = image.format, image.size
    except (UnidentifiedImageError, OSError, ValueError) as error:
        return f"not an image PIL can read ({type(error).__name__})"
    if min(size) < 1:
        return f"an image of {size[0]} x {size[1]} pixels"
    with open(path, "rb") as f:
        f.seek(max(0, Path(path).stat().st_size - TAIL))
        tail = f.read()
    ends = {"PNG": (b"IEND" in tail[-12:], "a PNG without its end chunk"),
            "JPEG": (b"\xff\xd9" in tail, "a JPEG without its end-of-image marker")}
    whole, missing = ends.get(kind or "", (True, ""))
    if whole or _decodes(path):  # bytes after the end (a phone's trailer) are no harm: decoded to be sure
        return None
    return f"cut short ({missing})"


def _decodes(path: Path) -> bool:
    """Does PIL decode every pixel (the slow check, for a file whose end looked wrong)?"""
    from PIL import Image
    try:
        with Image.open(path) as image:
            image.load()
        return True
    except (OSError, ValueError, SyntaxError):
        return False


def audio_problem(path: Path) -> str | None:
    """Why the recording at ``path`` cannot be decoded, or None: a format libsndfile does not
    recognise (a web page saved under the file's name), or no frames."""
    import soundfile
    try:
        info = soundfile.info(str(path))
    except (RuntimeError, OSError) as error:  # soundfile's LibsndfileError is a RuntimeError
        return f"not audio libsndfile can read ({str(error).splitlines()[0][:80]})"
    return None if info.frames > 0 else "a recording of no frames"


def tiff_problem(path: Path) -> str | None:
    """Why the TIFF stack at ``path`` cannot be read, or None: not a TIFF (a web page under its
    name), or cut short (its first or last page's strips end past the file's end)."""
    import tifffile
    try:
        with tifffile.TiffFile(path) as tif:
            size, pages = Path(path).stat().st_size, [tif.pages[0], tif.pages[-1]]
            ends = [max((o + n for o, n in zip(p.dataoffsets, p.databytecounts)), default=0) for p in pages]
            # a stack tifffile wrote states its shape: fewer pages than that is a file cut in its IFD chain
            expected = math.prod(tif.series[0].shape) // max(1, math.prod(tif.pages[0].shape))
            count = len(tif.pages)
    except (tifffile.TiffFileError, OSError, ValueError, IndexError) as error:
        return f"not a TIFF tifffile can read ({type(error).__name__})"
    if count < expected:
        return f"cut short ({count} of its {expected} pages)"
    return None if max(ends) <= size else f"cut short ({size} bytes, its pages reach {max(ends)})"


def problems(paths: list[Path], check: Callable[[Path], str | None], workers: int = 8) -> dict[int, str]:
    """Each failing file's position in ``paths`` -> why, checked ``workers`` at a time (reads, not CPU)."""
    with ThreadPoolExecutor(max(1, workers)) as pool:
        found = list(pool.map(check, paths))
    return {i: why for i, why in enumerate(found) if why}


def listed(paths: list[Path], bad: dict[int, str], first: int = 3) -> str:
    """``name (why), ...`` for the first few failing files."""
    return ", ".join(f"{paths[i].name} ({why})" for i, why in list(bad.items())[:first])


def refuse_test_files(paths: list[Path], bad: dict[int, str], error: type[Exception], what: str) -> None:
    """Test files the submission needs, refused by name when any cannot be read."""
    if bad:
        raise error(f"{len(bad)} of {len(paths)} {what} cannot be read, and the submission needs every one: "
                    f"{listed(paths, bad)}. Replace them with the competition's own files (download its data again)")


def note(unreadable: list[str], what: str) -> list[str]:
    """The run's note on the training files dropped as unreadable (none: no note)."""
    if not unreadable:
        return []
    return [f"{len(unreadable)} {what} cannot be read and were dropped: {', '.join(unreadable[:3])}"]
