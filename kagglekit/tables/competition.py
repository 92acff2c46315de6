"""A tabular competition's folder as the GBDTs, a network and a linear model all read it.

Kaggle ships ``train.csv``, ``test.csv`` and ``sample_submission.csv``: an id column, numeric
columns with gaps, text categories, the target (often words). ``read`` keeps the data as the
libraries want it: numeric gaps stay NaN (LightGBM, XGBoost and CatBoost route them
themselves), text columns become pandas categoricals over every value train, test and the
original data hold (each library's native categorical handling reads them), the target becomes
class indices in a fixed order (the classes in the competition's own words kept beside).

``original_csv``: the public data set a Playground competition was generated from, added to
training as Playground competitors do: its columns matched to the competition's by name with
spaces and case ignored (the original Fertilizer data set ships ``"Humidity "``), an
``is_original`` flag column on every row (0 for the competition's, train and test), its rows
appended after the competition's. Only the competition's rows are cross-validated and scored:
the original's join every fold's training rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..machine.display import notice
from ..readers import csvfile, tablecheck
from .timeseries import TableError

if TYPE_CHECKING:  # pandas is imported where a table is read (import time)
    import pandas as pd

FLAG = "is_original"


@dataclass
class Competition:
    folder: Path
    target: str
    id_column: str
    features: pd.DataFrame  # the competition's training rows, then the original's
    y: np.ndarray  # class indices (classification) or values, in the order of ``features``
    test: pd.DataFrame  # the test rows, the same columns
    ids: np.ndarray  # train.csv's ids (the original's rows: original-<k>)
    test_ids: np.ndarray
    classes: list | None  # the class labels in the competition's words, in index order
    categorical: list = field(default_factory=list)
    n_competition: int = 0  # the rows of train.csv: the ones the folds split and score
    dropped: dict = field(default_factory=dict)
    files: list = field(default_factory=list)  # the files read (what the results depend on)
    renamed: dict = field(default_factory=dict)  # test.csv's column -> train.csv's name for it

    def notes(self) -> list[str]:
        """What reading it decided, in a person's words: columns left out and why, test.csv's
        columns read under train.csv's spelling (``run.note`` shows them beside the results)."""
        said = [f"column {c!r} not used: {why}" for c, why in self.dropped.items()]
        return said + [f"test.csv's {t!r} read as train.csv's {c!r} (the names differ in case or spaces)"
                       for t, c in self.renamed.items()]

    @property
    def original(self) -> np.ndarray:
        """Positions of the original data's rows (they join every fold's training rows)."""
        return np.arange(self.n_competition, len(self.features))

    def training(self, rows: np.ndarray) -> np.ndarray:
        """A fold's training positions with the original data's rows added."""
        return np.concatenate([np.asarray(rows), self.original])

    def describe(self) -> str:
        kind = f"{len(self.classes)} classes" if self.classes else "a numeric target"
        extra = f" + {len(self.original):,} original rows" if len(self.original) else ""
        return (f"{self.n_competition:,} training rows{extra}, {len(self.test):,} test rows, "
                f"{self.features.shape[1]} features ({len(self.categorical)} categorical); "
                f"target {self.target!r}: {kind}")


def read(folder, target_column: str = "", *, classification: bool, original_csv: str | Path = "") -> Competition:
    """The competition in ``folder``; ``target_column`` default: the sample submission's value
    column. ``classification``: the metric scores classes (the target's values are labels)."""
    import pandas as pd
    folder = Path(folder)
    missing = [f for f in ("train.csv", "test.csv", "sample_submission.csv") if not (folder / f).exists()]
    if missing:
        raise TableError(f"{folder} lacks {', '.join(missing)}: data_dir must be a tabular "
                         "competition's folder (train.csv, test.csv, sample_submission.csv)")
    train, test = csvfile.read(folder / "train.csv"), csvfile.read(folder / "test.csv")
    sample = csvfile.read(folder / "sample_submission.csv")
    tablecheck.check_ids(sample, test, str(sample.columns[0]), TableError)
    test = _spelled_as_in_train(test, train)
    id_column, target = sample.columns[0], target_column or _sample_target(sample, folder)
    for frame, file in ((train, "train.csv"), (test, "test.csv")):
        if id_column not in frame.columns:
            raise TableError(f"{file} has no id column {id_column!r} (sample_submission.csv's first column)")
    if target not in train.columns:
        raise TableError(f"train.csv has no column {target!r} (target_column); its columns: "
                         f"{', '.join(map(str, train.columns[:12]))}")
    answered, note = tablecheck.labelled(train[target], target, TableError, classes=classification)
    if note:
        notice(note)
    train = train[answered].reset_index(drop=True)
    labels = train.pop(target)
    ids, test_ids = train.pop(id_column).to_numpy(), test.pop(id_column).to_numpy()
    renamed = test.attrs.get("renamed", {})
    dropped = {c: "not in test.csv" for c in train.columns if c not in test.columns}
    train = train.drop(columns=list(dropped))
    n, files = len(train), [folder / "train.csv", folder / "test.csv"]
    if original_csv:
        files.append(_original_file(original_csv))
        extra, extra_labels = _original(files[-1], list(train.columns), target, dropped)
        train = pd.concat([train.assign(**{FLAG: 0}), extra.assign(**{FLAG: 1})], ignore_index=True)
        test = test.assign(**{FLAG: 0})
        labels = pd.concat([labels, extra_labels], ignore_index=True)
        ids = np.concatenate([ids.astype(str), [f"original-{k}" for k in range(len(extra))]])
    test = test[list(train.columns)]
    categorical = _categoricals(train, test, dropped)
    features = train.drop(columns=[c for c in dropped if c in train.columns])
    test = test.drop(columns=[c for c in dropped if c in test.columns])
    dropped = {c: why for c, why in dropped.items()  # a column dropped anyway: its absence is moot
               if not (c.endswith(" (original)") and c[:-len(" (original)")] in dropped)}
    y, classes = _encode(labels, classification, n)
    return Competition(folder, target, id_column, features, y, test, ids, test_ids, classes,
                       categorical, n, dropped, files, renamed)


def _spelled_as_in_train(test, train):
    """test.csv's columns under train.csv's names where the two differ only in case or spaces
    (a test.csv spelling ``F1`` what train.csv calls ``f1``): the column is the same feature,
    and a model trained without it scores far worse. Said on screen (``renamed``)."""
    own = {str(c).strip().lower(): c for c in train.columns}
    renamed = {c: own[str(c).strip().lower()] for c in test.columns
               if c not in train.columns and str(c).strip().lower() in own
               and own[str(c).strip().lower()] not in test.columns}
    test = test.rename(columns=renamed)
    test.attrs["renamed"] = renamed
    return test


def _sample_target(sample, folder: Path) -> str:
    if len(sample.columns) != 2:
        raise TableError(f"{folder / 'sample_submission.csv'} has {len(sample.columns)} columns "
                         f"({', '.join(map(str, sample.columns[:6]))}): name the target with "
                         "target_column (the per-class columns are written from its classes)")
    return sample.columns[1]


def _original(path: Path, columns: list, target: str, dropped: dict):
    """The original data set's rows in the competition's columns, and its target."""
    import pandas as pd
    frame = csvfile.read(path)
    plain = {str(c).strip().lower(): c for c in frame.columns}
    wanted = [target, *columns]
    found = {c: plain[str(c).strip().lower()] for c in wanted if str(c).strip().lower() in plain}
    if target not in found:
        raise TableError(f"original_csv {path.name} has no target column {target!r} (names are "
                         f"matched ignoring spaces and case); its columns: {', '.join(map(str, frame.columns[:12]))}")
    lacking = [c for c in columns if c not in found]
    if lacking:
        dropped.update({f"{c} (original)": "not in original_csv: NaN there" for c in lacking})
    extra = pd.DataFrame({c: frame[found[c]] if c in found else np.nan for c in columns})
    labels = frame[found[target]].rename(target)
    keep = labels.notna().to_numpy()
    return extra[keep].reset_index(drop=True), labels[keep].reset_index(drop=True)


def _original_file(source) -> Path:
    from ..machine import env
    path = env.local_or_attached(source)
    if path.is_dir():
        tables = sorted(path.rglob("*.csv"))
        if len(tables) != 1:
            raise TableError(f"original_csv={source!r} is a folder with {len(tables)} CSV files: "
                             "name the file itself")
        path = tables[0]
    if not path.is_file():
        raise TableError(f"original_csv={source!r}: no such file, nor an attached dataset of that "
                         "owner/slug (attach it in the kernel's dataset_sources)")
    return path


def _categoricals(train, test, dropped: dict) -> list:
    """Text and boolean columns as categoricals over every value either table holds; a text
    column of mostly distinct values (a name, free text) is dropped."""
    import pandas as pd
    names = []
    for c in train.columns:
        if pd.api.types.is_numeric_dtype(train[c]) and not pd.api.types.is_bool_dtype(train[c]):
            continue
        both = pd.concat([train[c], test[c]], ignore_index=True).astype("object")
        if both.nunique() > 0.5 * len(both):
            dropped[c] = f"{both.nunique():,} distinct values in {len(both):,} rows: free text or an id"
            continue
        values = sorted(both.dropna().unique().tolist(), key=str)
        for frame in (train, test):
            frame[c] = pd.Categorical(frame[c].astype("object"), categories=values)
        names.append(c)
    return names


MANY_CLASSES = 50  # more distinct numbers than this, in over a tenth of the rows: a measurement


def _refuse_a_measurement(labels) -> None:
    """A classification metric given a target of measurements (a price, a yield): fractional
    values, or more distinct numbers than classes come in. Refused before any model trains; it
    would otherwise become hundreds of "classes" and fail, or score, far down the notebook."""
    import pandas as pd
    if not pd.api.types.is_numeric_dtype(labels) or pd.api.types.is_bool_dtype(labels):
        return
    distinct = labels.nunique()
    fractional = bool((labels.to_numpy(np.float64) % 1 != 0).any())
    if fractional or (distinct > MANY_CLASSES and distinct > 0.1 * len(labels)):
        raise TableError(f"the target {labels.name!r} holds {distinct:,} distinct numbers (e.g. "
                         f"{', '.join(map(str, labels.unique()[:3]))}){' with fractions' if fractional else ''}: "
                         "a measurement, but the metric scores classes. Name the competition's metric "
                         "(rmse | rmsle | mae | r2), or map the values to class labels first")


def _encode(labels, classification: bool, n: int) -> tuple[np.ndarray, list | None]:
    import pandas as pd
    if not classification:
        if not pd.api.types.is_numeric_dtype(labels):
            raise TableError(f"the target {labels.name!r} holds text ({labels.iloc[0]!r}): a "
                             "regression metric needs numbers; pick a classification metric")
        return labels.to_numpy(np.float64), None
    _refuse_a_measurement(labels[:n])
    values = labels.astype(str) if labels.dtype == object else labels
    classes, index = np.unique(values.to_numpy(), return_inverse=True)
    unseen = sorted(set(classes.tolist()) - set(np.unique(values.to_numpy()[:n]).tolist()), key=str)
    if unseen:
        raise TableError(f"original_csv's target holds {unseen[:5]} that train.csv never does "
                         "(another coding of the classes?): map them to the competition's labels")
    return index.astype(np.int64), classes.tolist()
