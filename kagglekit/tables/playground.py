"""A stand-in for Kaggle's Playground Series S5E6 ("Predicting Optimal Fertilizers", MAP@3),
written in the competition's exact layout: the tabular notebook's built-in data, and the
sandbox's mount of ``competitions/playground-series-s5e6``.

What each part reproduces of the real files (competition data page; the public "Fertilizer
Prediction" data set it was generated from):
- ``train.csv``: ``id,Temparature,Humidity,Moisture,Soil Type,Crop Type,Nitrogen,Potassium,
  Phosphorous,Fertilizer Name``: the misspelt ``Temparature``, column names with spaces, all
  numbers integers, two text categories (5 soil types, 11 crops), the target as words that look
  like numbers (``14-35-14``, ``28-28``) beside names (``DAP``, ``Urea``): 7 classes, unbalanced;
- ``test.csv``: the same columns without the target, its ids continuing after train's last;
- ``sample_submission.csv``: ``id,Fertilizer Name``, each row three labels separated by spaces
  (``14-35-14 10-26-26 Urea``), MAP@3's form;
- the original data set (``write_original``, a file of its own as its Kaggle dataset ships
  ``Fertilizer Prediction.csv``): no id, and ``"Humidity "`` with a trailing space;
- weak signal: the labels depend on the nutrients and the crop through noise, so MAP@3 sits far
  from 1 as on the leaderboard (about 0.38 there).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

SOILS = ("Black", "Clayey", "Loamy", "Red", "Sandy")
CROPS = ("Barley", "Cotton", "Ground Nuts", "Maize", "Millets", "Oil seeds", "Paddy", "Pulses",
         "Sugarcane", "Tobacco", "Wheat")
FERTILIZERS = ("10-26-26", "14-35-14", "17-17-17", "20-20", "28-28", "DAP", "Urea")
TARGET = "Fertilizer Name"


def _rows(n: int, rng) -> dict:
    frame = {"Temparature": rng.integers(25, 39, n), "Humidity": rng.integers(50, 73, n),
             "Moisture": rng.integers(25, 66, n), "Soil Type": rng.choice(SOILS, n),
             "Crop Type": rng.choice(CROPS, n), "Nitrogen": rng.integers(4, 43, n),
             "Potassium": rng.integers(0, 20, n), "Phosphorous": rng.integers(0, 43, n)}
    crop = np.searchsorted(CROPS, frame["Crop Type"])
    logits = np.stack([0.08 * frame["Phosphorous"] - 0.05 * frame["Nitrogen"] + 0.1 * (crop % 3),
                       0.07 * frame["Phosphorous"] + 0.03 * frame["Potassium"],
                       0.04 * (frame["Nitrogen"] + frame["Phosphorous"] + frame["Potassium"]) - 2,
                       0.05 * frame["Nitrogen"] - 0.5 + 0.2 * (crop % 2),
                       0.07 * frame["Nitrogen"] - 1.5,
                       0.06 * frame["Phosphorous"] + 0.02 * frame["Moisture"] - 2,
                       0.09 * frame["Nitrogen"] - 0.04 * frame["Phosphorous"] - 1.2], axis=1)
    logits = logits + rng.gumbel(size=logits.shape) * 1.6  # weak signal, as on the leaderboard
    frame[TARGET] = np.asarray(FERTILIZERS)[logits.argmax(1)]
    return frame


def write(folder: Path, rows: int = 2000, test_rows: int = 600, seed: int = 0, hidden: bool = False) -> Path:
    """The competition's three files in ``folder``; ``hidden``: another draw of the test rows
    (a scoring rerun's)."""
    import pandas as pd
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train = pd.DataFrame(_rows(rows, np.random.default_rng(seed)))
    train.insert(0, "id", np.arange(rows))
    test = pd.DataFrame(_rows(test_rows, np.random.default_rng(seed + 1 + int(hidden)))).drop(columns=TARGET)
    test.insert(0, "id", np.arange(rows, rows + test_rows))
    sample = pd.DataFrame({"id": test["id"], TARGET: "14-35-14 10-26-26 Urea"})
    for name, frame in (("train.csv", train), ("test.csv", test), ("sample_submission.csv", sample)):
        frame.to_csv(folder / name, index=False)
    return folder


def write_original(path: Path, rows: int = 99, seed: int = 0) -> Path:
    """The original data set as it ships (its own file, no id, ``"Humidity "``)."""
    import pandas as pd
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    original = pd.DataFrame(_rows(rows, np.random.default_rng(seed + 7))).rename(columns={"Humidity": "Humidity "})
    original.to_csv(path, index=False)
    return path


def builtin(rows: int, seed: int = 0) -> Path:
    """The stand-in of ``rows`` training rows (and a test set of a third of them), written once
    to the temporary folder: the notebook's data when ``data_dir`` is empty."""
    import tempfile

    from ..state import atomic
    folder = Path(tempfile.gettempdir()) / f"kagglekit-playground-s5e6-{rows}-{seed}"
    return atomic.write_once(folder, write, rows, max(1, rows // 3), seed)
