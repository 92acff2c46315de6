"""Real text for the text pipeline without a download: the system's man pages as a competition.

Which manual section a page belongs to (1 commands, 2 system calls, 3 library functions, 5 file
formats, 7 overviews, 8 administration), told from its text: a real, public, many-class text task
on any Linux machine with its manual installed (``/usr/share/man``), written in the layout of
Kaggle's text competitions (``textsets.read_competition`` reads it): ``train.csv`` (id, text,
section), ``test.csv``, ``sample_submission.csv`` and the ``solution.csv`` Kaggle publishes after
the end.

The real source's quirks, kept or handled: pages are gzip-compressed groff source; many files are
symlinks to another page (``_Exit.2.gz -> _exit.2.gz``) or one-line ``.so`` redirects, which would
put one text twice under two ids: both are skipped; comment lines (``.\\"``, licences) are dropped;
the ``.TH`` title line states the section itself (``.TH _exit 2``) and is dropped, so the label is
not in the text; other macros keep their words (``.B #include``), escapes (``\\fB``, ``\\-``,
``\\(em``) become plain text; the sections' sizes differ by two orders of magnitude (thousands of
section-1 pages, dozens of section-5), so ``per_section`` caps each; labels are numbers.
"""
from __future__ import annotations

import gzip
import random
import re
from pathlib import Path

from ..state import atomic

MAN_ROOT = Path("/usr/share/man")
SECTIONS = ("1", "2", "3", "5", "7", "8")
_ESCAPE = re.compile(r"\\f[BIRP]|\\f\(..|\\\(..|\\\*.|\\[-e&|^]|\\s[-+]?\d")


class ManPagesError(FileNotFoundError):
    """Too few man pages on this machine for the task asked."""


def page_text(path: Path, words: int = 400) -> str | None:
    """The words of one page (macros' arguments kept, comments and the title line dropped);
    None for a ``.so`` redirect or an empty page."""
    with gzip.open(path, "rt", errors="replace") as f:
        lines = f.read().splitlines()
    if any(line.startswith(".so ") for line in lines[:5]):
        return None
    kept = []
    for line in lines:
        if line.startswith(('.\\"', "'\\\"", ".TH ")):
            continue
        if line.startswith((".", "'")):
            line = (line.split(maxsplit=1) + [""])[1]
        kept.append(_ESCAPE.sub(" ", line).replace("\\", ""))
    text = " ".join(" ".join(kept).split()[:words])
    return text or None


def pages(section: str, root: Path = MAN_ROOT) -> list[Path]:
    """The section's page files, symlinked aliases left out, sorted."""
    folder = root / f"man{section}"
    return sorted(p for p in folder.glob("*.gz") if not p.is_symlink()) if folder.is_dir() else []


def write_competition(folder: Path | str, per_section: int = 150, test_share: float = 0.2, seed: int = 0,
                      sections=SECTIONS, root: Path = MAN_ROOT) -> Path:
    """The competition folder (see the module's docstring), written whole or not at all, once."""
    return atomic.write_once(folder, lambda partial: _write(partial, _sample(per_section, seed, sections, root),
                                                            test_share, seed))


def _sample(per_section: int, seed: int, sections, root: Path) -> list[tuple[str, str, str]]:
    rng, rows = random.Random(seed), []
    for section in sections:
        found = pages(section, root)
        rng.shuffle(found)
        texts: list[tuple[str, str]] = []  # (page, text)
        for page in found:  # read until the section has its share: section 1 holds thousands
            if len(texts) == per_section:
                break
            if (text := page_text(page)) is not None:
                texts.append((page.name, text))
        if len(texts) < 10:
            raise ManPagesError(f"{root}/man{section} holds {len(texts)} readable pages: install the manual "
                                "(apt-get install man-db manpages manpages-dev) or pass other sections")
        rows += [(name, text, section) for name, text in texts]
    rng.shuffle(rows)
    return rows


def _write(partial: Path, rows: list, test_share: float, seed: int) -> None:
    import pandas as pd
    frame = pd.DataFrame({"id": [f"man{seed}-{i:05d}" for i in range(len(rows))],
                          "page": [r[0] for r in rows], "text": [r[1] for r in rows],
                          "section": [int(r[2]) for r in rows]})
    cut = int(len(frame) * (1 - test_share))
    frame.iloc[:cut].to_csv(partial / "train.csv", index=False)
    frame.iloc[cut:][["id", "text"]].to_csv(partial / "test.csv", index=False)
    solution = frame.iloc[cut:][["id", "section"]].assign(Usage="Private")
    solution.to_csv(partial / "solution.csv", index=False)
    frame.iloc[cut:][["id"]].assign(section=1).to_csv(partial / "sample_submission.csv", index=False)
