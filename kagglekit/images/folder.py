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

from ..machine.display import notice
from ..readers import csvfile, filecheck, labelsets, tablecheck
from ..readers.decoding import each_decoded

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
    wants: str  # "label", "probability" (two classes: the second's), "probabilities" or "tags"
    dropped: list[str] = field(default_factory=list)  # ids in train.csv without a file
    answer_column: str = "label"  # the sample's column a label, a probability or the tags go in
    multilabel: bool = False  # several labels per image: ``labels`` is (N, L) of 0/1, one column per class
    layout: str = "label"  # train.csv's: "label" (a class per row), "tags" (labels separated by spaces), "columns"
    unreadable: list[str] = field(default_factory=list)  # training images dropped: "name (why)" (filecheck)

    @property
    def metric(self) -> str:
        """What the submission's form is scored by: ROC AUC for one probability (for several labels,
        the mean of each label's), samples F1 for tags, accuracy for a label (a probability per class
        is ranked by accuracy too: the kit's choice of model)."""
        if self.multilabel:
            return "f1" if self.wants == "tags" else "auc"
        return "auc" if self.wants == "probability" else "accuracy"

    @property
    def probability_columns(self) -> list[str]:
        """The sample's columns the submission fills with probabilities (whatever their placeholders)."""
        columns = {"probability": [self.answer_column], "probabilities": [str(c) for c in self.classes]}
        return columns.get(self.wants, [])

    def labels_of(self, table, target_column: str = "label") -> np.ndarray:
        """The labels of ``table`` (train.csv's layout: ``solution.csv`` too) in the kit's form: class
        indices, or (N, L) 0/1 for several labels; a label the training images never showed is refused."""
        if self.layout == "columns":
            y = table[[str(c) for c in self.classes]].to_numpy(np.float32)
            return y if self.multilabel else y.argmax(1)
        if self.layout == "tags":
            return labelsets.multi_hot(table[target_column], self.classes)
        index = {str(c): k for k, c in enumerate(self.classes)}
        return table[target_column].astype(str).map(index).to_numpy()

    def submission(self, probs: np.ndarray, threshold: float = 0.5):
        """The sample's table filled in: the most probable class in the competition's words, the
        second class's probability, each class's (or label's) probability in the sample's own
        columns, or the labels above ``threshold`` separated by spaces."""
        import pandas as pd
        probs = np.asarray(probs)
        frame = pd.DataFrame({self.id_column: self.test_ids})
        if self.wants == "label":
            frame[self.answer_column] = [self.classes[i] for i in probs.argmax(1)]
        elif self.wants == "probability":
            frame[self.answer_column] = probs[:, 1]
        elif self.wants == "tags":
            frame[self.answer_column] = labelsets.as_tags(probs, self.classes, threshold)
        else:
            for k, name in enumerate(self.classes):
                frame[str(name)] = probs[:, k]
        return frame


def read_competition(folder: Path | str, target_column: str = "label", id_column: str = "",
                     multi_label: bool = False) -> ImageCompetition:
    """The competition in ``folder`` (see the module). ``multi_label``: ``target_column`` holds several
    labels per image separated by spaces (Planet's tags); a 0/1 column per label named as the sample's
    answer columns (RANZCR's) is found without it."""
    folder = Path(folder)
    sample = _one(folder, "sample_submission.csv")
    schema = csvfile.read(sample)
    ids_col = id_column or str(schema.columns[0])
    test_dir = _folder(folder, TEST_FOLDERS)
    tablecheck.check_ids(schema, None, ids_col, ImageDataError)
    test_ids = schema[ids_col].astype(str).tolist()
    test_paths = [_image(test_dir, i) for i in test_ids]
    if any(p is None for p in test_paths):
        missing = [i for i, p in zip(test_ids, test_paths) if p is None][:5]
        raise ImageDataError(f"{test_dir}: no image for sample_submission.csv's ids {missing}: the submission "
                             "needs every one")
    found = [p for p in test_paths if p is not None]
    filecheck.refuse_test_files(found, filecheck.problems(found, filecheck.image_problem), ImageDataError,
                                f"test images in {test_dir.name}/")
    if (folder / "train.csv").exists():
        paths, table, dropped = _from_table(folder, ids_col)
        paths, table, unreadable = _readable(paths, table)
        columns = labelsets.label_columns(table, _answers(schema, ids_col), target_column)
        if columns or multi_label:
            comp = _multilabel(folder, paths, table, columns, target_column, schema, ids_col, found, test_ids, dropped)
            comp.unreadable = unreadable
            return comp
        names = _target(table, target_column)
        answered, note = tablecheck.labelled(table[target_column], target_column, ImageDataError)
        notice(note) if note else None
        paths, names = [p for p, a in zip(paths, answered) if a], [n for n, a in zip(names, answered) if a]
    else:
        paths, names, dropped = _from_subfolders(_folder(folder, TRAIN_FOLDERS))
        paths, names, unreadable = _readable(paths, names)
    classes = sorted(set(names), key=str)
    if len(classes) < 2:
        raise ImageDataError(f"{folder}: every training image has the class {classes[0]!r}: a classifier needs "
                             f"two or more (check target_column={target_column!r}, or the class sub-folders)")
    index = {c: k for k, c in enumerate(classes)}
    wants, answer = _wanted(schema, ids_col, classes, sample)
    return ImageCompetition(folder, paths, np.array([index[n] for n in names]), classes, found, test_ids, ids_col,
                            sample, wants, dropped, answer, unreadable=unreadable)


def _readable(paths: list[Path], rows):
    """The training images a decoder can read, their rows (a table's, or a list's), and the others as
    "name (why)": dropped before any is decoded (``filecheck``)."""
    bad = filecheck.problems(paths, filecheck.image_problem)
    keep = [i for i in range(len(paths)) if i not in bad]
    kept = rows.iloc[keep].reset_index(drop=True) if hasattr(rows, "iloc") else [rows[i] for i in keep]
    return [paths[i] for i in keep], kept, [f"{paths[i].name} ({why})" for i, why in bad.items()]


def _multilabel(folder: Path, paths, table, columns: list[str], target_column: str, schema, ids_col: str,
                test_paths, test_ids, dropped) -> ImageCompetition:
    """A 0/1 column per label (several per image, or exactly one: a class as one-hot columns, as Plant
    Pathology's), or ``target_column``'s labels separated by spaces."""
    sample = folder / "sample_submission.csv"
    if columns:
        y = table[columns].to_numpy(np.float32)
        several = bool((y.sum(1) != 1).any())
        comp = ImageCompetition(folder, paths, y if several else y.argmax(1), columns, test_paths, test_ids, ids_col,
                                sample, "probabilities", dropped, "", several, "columns")
    else:
        classes = labelsets.tag_classes(_target(table, target_column), target_column)
        answers = _answers(schema, ids_col)
        if len(answers) != 1:
            raise ImageDataError(f"multi_label=True: {sample.name} should hold the ids and one column of labels "
                                 f"separated by spaces, not {len(answers)} ({', '.join(answers[:6])})")
        comp = ImageCompetition(folder, paths, np.empty(0), classes, test_paths, test_ids, ids_col, sample, "tags",
                                dropped, answers[0], True, "tags")
        comp.labels = comp.labels_of(table, target_column)
    return comp


def _answers(schema, id_column: str) -> list[str]:
    return [str(c) for c in schema.columns if str(c) != id_column]


def _wanted(schema, id_column: str, classes: list, sample: Path) -> tuple[str, str]:
    """(what the sample wants, the column it goes in): a label, one probability (two classes, the
    sample's placeholders are fractions), or a probability per class (a column named for each)."""
    answers = _answers(schema, id_column)
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


def _from_table(folder: Path, id_column: str):
    """(each image's path, train.csv's rows that have one, the ids without a file)."""
    table = csvfile.read(folder / "train.csv")
    key = id_column if id_column in table.columns else str(table.columns[0])
    images = _folder(folder, TRAIN_FOLDERS)
    found = [_image(images, str(v)) for v in table[key]]
    keep = [p is not None for p in found]
    dropped = [str(v) for v, k in zip(table[key], keep) if not k]
    return [p for p in found if p is not None], table[keep].reset_index(drop=True), dropped


def _target(table, target_column: str) -> list:
    if target_column not in table.columns:
        raise ImageDataError(f"train.csv has no column {target_column!r} (target_column); its columns: "
                             f"{', '.join(map(str, table.columns))}")
    return table[target_column].tolist()


def _from_subfolders(images: Path):
    paths, names = [], []
    for sub in sorted(p for p in images.iterdir() if p.is_dir() and not filecheck.stray(p.name)):
        for path in sorted(sub.iterdir()):
            if path.suffix.lower() in EXTENSIONS and not filecheck.stray(path.name):
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
