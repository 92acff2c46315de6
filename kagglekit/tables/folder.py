"""A labelled table as a tabular competition ships it, as tensors a classifier trains on.

Kaggle's tabular competitions give a folder with ``train.csv`` (beside ``test.csv`` and
``sample_submission.csv``): an id column, numeric columns with gaps, text categories, and the
target, often as words. ``read_labelled`` finds the table (the folder's ``train`` table unless
``name`` says otherwise), drops the id, fills numeric gaps with the column's median, one-hot
encodes the categories (a gap is a category of its own) and numbers the target's classes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import TensorDataset

from ..readers import csvfile, tablecheck
from .timeseries import TableError, find_file

if TYPE_CHECKING:  # pandas is imported where a table is read
    import pandas as pd

MAX_CATEGORIES = 50  # a text column with more distinct values is free text or an id: dropped


def find(path: Path, name: str = "") -> Path:
    """``path`` itself, its ``train`` table, or its only table (``name`` picks one)."""
    path = Path(path)
    if path.is_dir() and not name:
        trains = sorted(p for p in path.iterdir() if p.stem == "train" and p.suffix.lower() in (".csv", ".parquet"))
        if trains:
            return trains[0]
    return find_file(path, name)


@dataclass
class Preprocessing:
    """What ``read_labelled`` fitted on the training table, to apply to the test table as is:
    the medians that fill numeric gaps, each category column's values (one-hot; a value train
    never had is all zeros), the feature columns in their order."""
    numeric: list
    medians: dict
    categories: dict
    columns: list

    def features(self, frame) -> np.ndarray:
        import pandas as pd
        missing = [c for c in [*self.numeric, *self.categories] if c not in frame.columns]
        if missing:
            raise TableError(f"the test table lacks the training columns {', '.join(map(str, missing[:6]))}")
        filled = frame[self.numeric].astype(float).fillna(self.medians).fillna(0.0)
        encoded = [pd.get_dummies(pd.Categorical(frame[c].astype("object"), categories=values),
                                  prefix=c, dummy_na=True, dtype=float) for c, values in self.categories.items()]
        features = pd.concat([filled, *encoded], axis=1).reindex(columns=self.columns, fill_value=0.0)
        return features.to_numpy(np.float32)


def _fit(frame, dropped: dict) -> tuple[Preprocessing, np.ndarray]:
    import pandas as pd
    dropped.update({c: "empty in every row" for c in frame.columns if c not in dropped and frame[c].isna().all()})
    numeric = [c for c in frame.columns if c not in dropped and pd.api.types.is_numeric_dtype(frame[c])]
    text = [c for c in frame.columns if c not in dropped and c not in numeric]
    for c in text:
        if frame[c].nunique() > MAX_CATEGORIES:
            dropped[c] = f"{frame[c].nunique()} distinct values: free text, not categories"
    categories = {c: sorted(frame[c].dropna().astype("object").unique().tolist(), key=str)
                  for c in text if c not in dropped}
    medians = frame[numeric].astype(float).median(numeric_only=True).to_dict()
    prep = Preprocessing(numeric, medians, categories, [])
    encoded = [pd.get_dummies(pd.Categorical(frame[c].astype("object"), categories=v), prefix=c,
                              dummy_na=True, dtype=float) for c, v in categories.items()]
    prep.columns = [*numeric, *(col for e in encoded for col in e.columns)]
    return prep, prep.features(frame)


def read_labelled(path, target: str, name: str = "") -> tuple[TensorDataset, dict]:
    """``(TensorDataset(features float32, class index), info)``; ``info`` names the feature
    columns, the classes (in the order of their index), the columns dropped with why, the
    fitted ``Preprocessing`` (``info["prep"]``: the test table through the same steps), and
    ``info["notes"]``: rows without an answer, left out. No answer at all, or one class: refused."""
    import pandas as pd
    file = find(Path(path), name)
    frame = csvfile.read(file) if file.suffix.lower() == ".csv" else pd.read_parquet(file)
    if target not in frame.columns:
        raise TableError(f"{file.name} has no column {target!r} (target_column); its columns: "
                         f"{', '.join(map(str, frame.columns[:12]))}")
    answered, unlabelled = tablecheck.labelled(frame[target], target, TableError, file=file.name)  # one class: refused
    frame = frame[answered.to_numpy()].reset_index(drop=True)
    labels = frame.pop(target)
    _refuse_a_measurement(labels, file.name)
    dropped = {c: "a row id" for c in frame.columns if str(c).lower() == "id" or
               (str(c).lower().endswith("id") and frame[c].is_unique)}
    prep, features = _fit(frame, dropped)
    classes, index = np.unique(labels.astype(str) if labels.dtype == object else labels, return_inverse=True)
    dataset = TensorDataset(torch.tensor(features), torch.as_tensor(index, dtype=torch.long))
    return dataset, {"file": file.name, "features": list(map(str, prep.columns)), "classes": classes.tolist(),
                     "dropped": dropped, "prep": prep, "notes": [unlabelled] if unlabelled else []}


def read_test(path, prep: Preprocessing, name: str = "test") -> tuple[pd.DataFrame, np.ndarray]:
    """``(the test table, its features)``: a competition's ``test.csv`` beside ``train.csv``,
    through the training table's preprocessing (medians, categories, columns: fitted on train
    only, so nothing of the test rows leaks into training). With the competition's
    ``sample_submission.csv`` beside it, the ids of the two are checked first: each once, the same set."""
    import pandas as pd
    file = find_file(Path(path), name) if Path(path).is_dir() else Path(path)
    frame = csvfile.read(file) if file.suffix.lower() == ".csv" else pd.read_parquet(file)
    sample = file.parent / "sample_submission.csv"
    if sample.exists():
        ids = csvfile.read(sample, dtype=str)
        tablecheck.check_ids(ids, frame, ids.columns[0], TableError, test_name=file.name)
    return frame, prep.features(frame)


def _refuse_a_measurement(labels, file: str) -> None:
    """A classifier given a target of measurements (a price, a yield: fractional values, or more
    distinct numbers than classes come in) would learn each value as a class and copy training
    values into a submission: refused, naming the column."""
    import pandas as pd
    if not pd.api.types.is_numeric_dtype(labels) or pd.api.types.is_bool_dtype(labels):
        return
    distinct = labels.nunique()
    if (labels.to_numpy(np.float64) % 1 != 0).any() or distinct > MAX_CATEGORIES:
        raise TableError(f"{file}: the target {labels.name!r} holds {distinct:,} distinct numbers (e.g. "
                         f"{', '.join(map(str, labels.unique()[:3]))}): a measurement, but this notebook "
                         "classifies. Name a class column as target_column (the tabular notebook takes a "
                         "regression metric: rmse | mae | r2 | rmsle)")
