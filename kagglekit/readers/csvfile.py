"""A CSV file as Kaggle's and the wider world's tables ship: read, or refused by name.

pandas reads an empty file as ``EmptyDataError: No columns to parse from file`` (no name), and a
file separated by ``;`` or tabs (a European export, an original data set) as one column whose
name holds every header: the pipeline then fails far from the cause ("no column 'target'").
``read`` names an empty file, or one with a header and no row, and reads a file whose first
line is separated by ``;``, a tab or ``|`` (and holds no comma) with that separator, saying so.
"""
from __future__ import annotations

import csv
from pathlib import Path

from ..machine.display import notice

SEPARATORS = (",", ";", "\t", "|")


class TableFileError(ValueError):
    """A table file that cannot be read as a table: empty, or without a row."""


def separator(path: Path) -> str:
    """The first line's separator: a comma, unless the line holds none and another of
    ``SEPARATORS`` splits it."""
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        first = f.readline()
    if "," in first or not first.strip():
        return ","
    try:
        return csv.Sniffer().sniff(first, delimiters="".join(SEPARATORS)).delimiter
    except csv.Error:
        return ","


def read(path: Path | str, *, rows_needed: bool = True, **options):
    """``pandas.read_csv(path)`` with the file's own separator; TableFileError naming an empty
    file, or (``rows_needed``) one with a header and no row."""
    import pandas as pd
    path = Path(path)
    if path.stat().st_size == 0:
        raise TableFileError(f"{path} is empty (0 bytes): a CSV table needs a header and rows")
    sep = options.pop("sep", None) or separator(path)
    if sep != ",":
        shown = {"\t": "tabs"}.get(sep, repr(sep))
        notice(f"{path.name} is separated by {shown}, not commas: read so")
    frame = pd.read_csv(path, sep=sep, **options)
    if rows_needed and frame.empty:
        raise TableFileError(f"{path} has a header ({', '.join(map(str, frame.columns[:6]))}) and no row")
    return frame
