"""A graph folder checked before any training (issue 84): what the Elliptic and Planetoid readers
refuse by name, and what they read on with a note.

Elliptic's three CSVs go wrong the way shared copies of it do: the headerless features file
re-saved with a header, a transaction listed twice, classes written as words ("illicit") where
the data set says "1"/"2"/"unknown" (every node would silently read as unlabelled), an edge
naming a transaction the features lack, empty or non-numeric feature cells (a NaN loss hours
in). Planetoid's eight ``ind.<name>.*`` files go missing one at a time or arrive cut short,
and PyG then fails inside its own reader. Each check raises ``GraphDataError`` naming the file,
what is wrong, a few of the offending rows and the fix.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

ELLIPTIC_CLASSES = (("1", 1), ("2", 0), ("unknown", -1))  # illicit, licit, not labelled
PLANETOID_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")


class GraphDataError(ValueError):
    """A graph folder whose files do not hold what its layout says."""


class GraphFileMissing(GraphDataError, FileNotFoundError):
    """A file the graph's layout needs is not in the folder."""


def _first(values, k: int = 3) -> str:
    return ", ".join(map(str, list(values)[:k]))


def features_table(path: Path):
    """``elliptic_txs_features.csv`` as a frame of numbers (txId, time step, features), its header
    row dropped with a note when a copy gained one; refused when ids repeat or cells are empty
    or not numbers."""
    import pandas as pd

    from ..machine.display import notice
    first = pd.read_csv(path, header=None, nrows=1)
    if first.shape[1] < 3:
        raise GraphDataError(f"{path.name} has {first.shape[1]} columns: Elliptic's are txId, time step, "
                             "then the features (165), without a header")
    header = bool(pd.to_numeric(first.iloc[0, :2], errors="coerce").isna().any())
    if header:
        notice(f"{path.name}: its first row is a header ({_first(first.iloc[0, :3])}, ...): read as one "
               "(Kaggle's file has none)")
    frame = pd.read_csv(path, header=0 if header else None)
    frame.columns = range(frame.shape[1])
    numbers = frame.apply(lambda c: c if c.dtype.kind in "iuf" else pd.to_numeric(c, errors="coerce"))  # text: NaN
    bad = numbers.isna()  # empty, or text where a number belongs
    if bad.to_numpy().any():
        row, column = np.argwhere(bad.to_numpy())[0]
        cell = frame.iat[row, column]
        shown = "empty, or a marker such as n/a" if pd.isna(cell) else repr(cell)
        raise GraphDataError(f"{path.name}: {int(bad.to_numpy().sum())} cells empty or not numbers, the first "
                             f"in row {row + 1}, column {column + 1} ({shown}): a model would train on NaN; "
                             "fill or drop those rows")
    repeated = numbers[0][numbers[0].duplicated()]
    if len(repeated):
        raise GraphDataError(f"{path.name} lists {len(repeated)} transactions twice (txId {_first(repeated)}): "
                             "one row per transaction; drop the repeats")
    return numbers


def class_labels(path: Path, classes, tx_ids: np.ndarray) -> np.ndarray:
    """Each transaction's label (1 illicit, 0 licit, -1 unknown or not listed) from
    ``elliptic_txs_classes.csv``, joined by txId; refused when its classes are not Elliptic's
    or no transaction is labelled."""
    import pandas as pd

    from ..machine.display import notice
    named = classes[classes.columns[1]].astype(str).str.strip()
    classes_of = dict(ELLIPTIC_CLASSES)
    unknown = sorted(set(named) - set(classes_of))
    if unknown:
        raise GraphDataError(f"{path.name}: classes {_first(unknown)} are not Elliptic's \"1\" (illicit), "
                             "\"2\" (licit) or \"unknown\": map them to those before training")
    ids = pd.to_numeric(classes[classes.columns[0]], errors="coerce")
    stray = int((~ids.isin(tx_ids)).sum())
    if stray:
        notice(f"{path.name}: {stray} transactions the features file lacks (txId {_first(ids[~ids.isin(tx_ids)])}): "
               "ignored")
    label = named.map(classes_of).set_axis(ids.to_numpy())
    label = label[~label.index.duplicated()].reindex(tx_ids).fillna(-1).to_numpy(np.int64)
    if not (label >= 0).any():
        raise GraphDataError(f"{path.name} labels none of the {len(tx_ids):,} transactions of the features "
                             "file: their txIds do not match, or every class is \"unknown\"")
    return label


def edge_ends(path: Path, edges, position) -> list[np.ndarray]:
    """Each edge's two ends as node positions; refused, naming a few, when an edge names a
    transaction the features file lacks."""
    ends = [position.reindex(edges[c]).to_numpy() for c in edges.columns[:2]]
    missing = np.isnan(np.stack(ends).astype(float)).any(0)
    if missing.any():
        raise GraphDataError(f"{path.name}: {int(missing.sum())} edges name transactions missing from the features "
                             f"file (txId1 {_first(edges[edges.columns[0]][missing])}): drop those edges, or use "
                             "the features file that goes with this edge list")
    return ends


def planetoid_files(raw: Path, name: str) -> None:
    """All eight ``ind.<name>.*`` files present and not empty, else refused naming the missing."""
    missing = [f"ind.{name}.{part}" for part in PLANETOID_PARTS
               if not (raw / f"ind.{name}.{part}").is_file() or (raw / f"ind.{name}.{part}").stat().st_size == 0]
    if missing:
        raise GraphFileMissing(f"{raw}: the Planetoid data set {name!r} lacks {', '.join(missing)} (or they are "
                               f"empty): it needs all of {', '.join(f'ind.{name}.{p}' for p in PLANETOID_PARTS)}")
