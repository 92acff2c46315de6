"""The ways real competition folders go wrong, applied to a good folder (issue 84's battery).

Each mutation takes a copy of a pipeline's good stand-in folder and returns what the user would
give as ``data_dir`` (usually the folder; one level above it; its table's file), or None where
the mutation does not apply to that layout (a folder of CSVs has no image file to truncate).
A mutation added here runs on every pipeline of tests/test_datafolders.py.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd


@dataclass(frozen=True)
class Layout:
    """Where a pipeline's folder keeps what the mutations touch."""
    target: str  # train.csv's answer column ("" where train.csv has none)
    files: str = ""  # a glob of the training files the ids name ("" where the text is in the CSV)
    test_files: str = ""  # the same for the test files
    test_table: str = "test.csv"  # the table of the test rows ("" where the sample is the only list)


def _csv(path: Path, change) -> None:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    change(frame).to_csv(path, index=False)


def _first(folder: Path, pattern: str) -> Path | None:
    found = sorted(folder.glob(pattern)) if pattern else []
    return found[len(found) // 2] if found else None


def target_renamed(folder: Path, layout: Layout):
    if not layout.target:
        return None
    _csv(folder / "train.csv", lambda f: f.rename(columns={layout.target: layout.target + "_v2"}))
    return folder


def target_emptied(folder: Path, layout: Layout):
    if not layout.target:
        return None
    _csv(folder / "train.csv", lambda f: f.assign(**{layout.target: ""}))
    return folder


def target_constant(folder: Path, layout: Layout):
    if not layout.target:
        return None
    _csv(folder / "train.csv", lambda f: f.assign(**{layout.target: f[layout.target].iloc[0]}))
    return folder


def target_half_missing(folder: Path, layout: Layout):
    """Unlabelled rows among the labelled (a pseudo-label pool shipped in train.csv)."""
    if not layout.target:
        return None

    def blank(frame):
        frame.loc[frame.index[::2], layout.target] = ""
        return frame
    _csv(folder / "train.csv", blank)
    return folder


def extra_column_empty(folder: Path, layout: Layout):
    _csv(folder / "train.csv", lambda f: f.assign(notes=""))
    return folder


def test_row_duplicated(folder: Path, layout: Layout):
    table = folder / (layout.test_table or "sample_submission.csv")
    if not table.exists():
        return None
    _csv(table, lambda f: pd.concat([f, f.iloc[[-1]]], ignore_index=True))
    return folder


def sample_row_duplicated(folder: Path, layout: Layout):
    if not (folder / "sample_submission.csv").exists():
        return None
    _csv(folder / "sample_submission.csv", lambda f: pd.concat([f, f.iloc[[-1]]], ignore_index=True))
    return folder


def sample_id_unknown(folder: Path, layout: Layout):
    """An id of the sample that test.csv lacks."""
    if not layout.test_table or not (folder / "sample_submission.csv").exists():
        return None

    def rename(frame):
        frame.iloc[0, 0] = "no-such-id-0"
        return frame
    _csv(folder / "sample_submission.csv", rename)
    return folder


def _one_file(folder: Path, pattern: str, change):
    """``change`` applied to one file ``pattern`` names (None: the layout has no such files)."""
    path = _first(folder, pattern)
    if path is None:
        return None
    change(path)
    return folder


def file_truncated(folder: Path, layout: Layout):
    return _one_file(folder, layout.files, lambda p: p.write_bytes(p.read_bytes()[:max(1, p.stat().st_size // 3)]))


def file_of_another_format(folder: Path, layout: Layout):
    return _one_file(folder, layout.files,
                     lambda p: p.write_text("<!DOCTYPE html><html><body>Too many requests</body></html>"))


def file_missing(folder: Path, layout: Layout):
    return _one_file(folder, layout.files, Path.unlink)


def test_file_missing(folder: Path, layout: Layout):
    return _one_file(folder, layout.test_files, Path.unlink)


def stray_files(folder: Path, layout: Layout):
    """What a Mac, Windows or a zip program leaves: .DS_Store, Thumbs.db, __MACOSX/, a README."""
    for sub in [folder, *(p for p in folder.iterdir() if p.is_dir())]:
        (sub / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(64))
        (sub / "Thumbs.db").write_bytes(bytes(32))
    (folder / "README.md").write_text("# the competition's data\n")
    macosx = folder / "__MACOSX"
    macosx.mkdir()
    (macosx / "._train.csv").write_bytes(bytes(16))
    return folder


def one_level_too_high(folder: Path, layout: Layout):
    return folder.parent


def given_as_its_table(folder: Path, layout: Layout):
    return folder / "train.csv" if (folder / "train.csv").exists() else None


MUTATIONS = (target_renamed, target_emptied, target_constant, target_half_missing, extra_column_empty,
             test_row_duplicated, sample_row_duplicated, sample_id_unknown, file_truncated, file_of_another_format,
             file_missing, test_file_missing, stray_files, one_level_too_high, given_as_its_table)


def mutated_copy(good: Path, where: Path, mutation, layout: Layout) -> Path | None:
    """A copy of the folder ``good`` under ``where/<mutation>/``, mutated; what to give as data_dir."""
    copy = where / mutation.__name__ / good.name
    shutil.copytree(good, copy)
    return mutation(copy, layout)
