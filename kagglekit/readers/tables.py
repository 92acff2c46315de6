"""A labelled table as a tabular competition ships it, as tensors a classifier trains on.

Kaggle's tabular competitions give a folder with ``train.csv`` (beside ``test.csv`` and
``sample_submission.csv``): an id column, numeric columns with gaps, text categories, and the
target, often as words. ``read_labelled`` finds the table (the folder's ``train`` table unless
``name`` says otherwise), drops the id, fills numeric gaps with the column's median, one-hot
encodes the categories (a gap is a category of its own) and numbers the target's classes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from .timeseries import TableError, find_file

MAX_CATEGORIES = 50  # a text column with more distinct values is free text or an id: dropped


def find(path: Path, name: str = "") -> Path:
    """``path`` itself, its ``train`` table, or its only table (``name`` picks one)."""
    path = Path(path)
    if path.is_dir() and not name:
        trains = sorted(p for p in path.iterdir() if p.stem == "train" and p.suffix.lower() in (".csv", ".parquet"))
        if trains:
            return trains[0]
    return find_file(path, name)


def read_labelled(path, target: str, name: str = "") -> tuple[TensorDataset, dict]:
    """``(TensorDataset(features float32, class index), info)``; ``info`` names the feature
    columns, the classes (in the order of their index) and the columns dropped, with why."""
    import pandas as pd
    file = find(Path(path), name)
    frame = (pd.read_csv if file.suffix.lower() == ".csv" else pd.read_parquet)(file)
    if target not in frame.columns:
        raise TableError(f"{file.name} has no column {target!r} (target_column); its columns: "
                         f"{', '.join(map(str, frame.columns[:12]))}")
    labels = frame.pop(target)
    if labels.isna().any():
        raise TableError(f"{file.name}: {int(labels.isna().sum())} rows have no {target!r}: drop them "
                         "or fill them before training")
    dropped = {c: "a row id" for c in frame.columns if str(c).lower() == "id" or
               (str(c).lower().endswith("id") and frame[c].is_unique)}
    numeric = [c for c in frame.columns if c not in dropped and pd.api.types.is_numeric_dtype(frame[c])]
    text = [c for c in frame.columns if c not in dropped and c not in numeric]
    for c in text:
        if frame[c].nunique() > MAX_CATEGORIES:
            dropped[c] = f"{frame[c].nunique()} distinct values: free text, not categories"
    categories = [c for c in text if c not in dropped]
    filled = frame[numeric].astype(float).fillna(frame[numeric].median(numeric_only=True)).fillna(0.0)
    encoded = pd.get_dummies(frame[categories].astype("object"), dummy_na=True, dtype=float)
    features = pd.concat([filled, encoded], axis=1)
    classes, index = np.unique(labels.astype(str) if labels.dtype == object else labels, return_inverse=True)
    dataset = TensorDataset(torch.tensor(features.to_numpy(np.float32)), torch.as_tensor(index, dtype=torch.long))
    return dataset, {"file": file.name, "features": list(map(str, features.columns)),
                     "classes": classes.tolist(), "dropped": dropped}
