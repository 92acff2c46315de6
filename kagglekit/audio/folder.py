"""Animal-sound competitions as BirdCLEF ships them (2021-2025): ``train.csv`` (``primary_label``,
``secondary_labels``, ``filename``) beside ``train_audio/<label>/<file>.ogg``, ``taxonomy.csv``,
one-minute ``test_soundscapes/*.ogg`` and ``sample_submission.csv``: a ``row_id`` per 5-second
window (``<soundscape>_<end second>``) and a probability column per species; since 2024 also
``train_soundscapes/*.ogg``, unlabelled soundscapes of the test's sites (the pseudo-label pool).

What the reader copes with, because the real files do it (each in ``audiosynth``'s stand-in):
labels that are eBird codes beside numeric iNaturalist ids (``"1139490"``: read as text, never as
numbers, or the columns no longer match); ``secondary_labels`` as Python list strings, empty as
``[]`` or ``['']``, naming species outside the taxonomy (dropped, counted); species of the
taxonomy without a recording; recordings shorter than a window and others minutes long; extra
columns (``type``, ``rating``, ``author``, ``url``...); a ``filename`` whose file is missing
(dropped and said); and a public ``test_soundscapes/`` that is empty: the hidden soundscapes
replace it only in the scoring rerun, so a version that finds none writes the header alone.

Audio is decoded by libsndfile (``soundfile``, in Kaggle's image): Ogg Vorbis, FLAC, WAV; stereo
is averaged to mono and another sample rate resampled (``scipy.signal.resample_poly``). Decoded
windows are stored as int16: half of float32's bytes, and 96 dB of range above Vorbis's own loss; or, through
a transform applied as they are decoded, as the features a model reads (float16 log-mel spectrograms).
"""
from __future__ import annotations

import ast
import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..machine.display import notice
from ..readers import csvfile, filecheck, tablecheck
from ..readers.decoding import decode_all, each_decoded  # noqa: F401 (kk.audio.decode_all: the notebook's)

SAMPLE_RATE = 32000  # BirdCLEF's, every year
WINDOW_S = 5  # the scored window
AUDIO = (".ogg", ".flac", ".wav", ".mp3")


class AudioDataError(ValueError):
    """A competition folder that does not hold what a BirdCLEF-style competition needs."""


@dataclass
class AudioCompetition:
    folder: Path
    classes: list[str]  # sample_submission.csv's probability columns, in its order
    clips: list[Path]  # each training recording, in train.csv's order (missing files dropped)
    primary: np.ndarray  # the class index of each clip's primary label
    secondary: list[list[int]]  # the class indices of each clip's background species
    soundscapes: list[Path]  # test_soundscapes/, sorted (empty in the public data)
    sample: Path
    dropped: list[str] = field(default_factory=list)  # filenames in train.csv without a file (the caller says so)
    unknown_secondary: int = 0  # secondary labels outside the submission's columns (dropped)
    unreadable: list[str] = field(default_factory=list)  # training recordings dropped: "name (why)" (filecheck)
    pool: list[Path] = field(default_factory=list)  # train_soundscapes/, sorted: unlabelled, readable ones

    def targets(self, secondary_weight: float = 0.5) -> np.ndarray:
        """(clips, classes) float32: 1 for the primary label, ``secondary_weight`` for the
        background species (weak labels: the recordist heard them somewhere in the clip)."""
        out = np.zeros((len(self.clips), len(self.classes)), np.float32)
        for row, others in enumerate(self.secondary):
            out[row, others] = secondary_weight
        out[np.arange(len(self.clips)), self.primary] = 1.0
        return out

    def submission(self, row_ids: list[str], probs: np.ndarray):
        """The sample's columns filled in: ``row_id`` and a probability per species."""
        import pandas as pd
        frame = pd.DataFrame(np.asarray(probs, np.float64).reshape(len(row_ids), len(self.classes)),
                             columns=self.classes)
        frame.insert(0, "row_id", row_ids)
        return frame

    def test_scores(self, row_ids: list[str], candidates: dict, metric) -> dict:
        """``{"test_<name>": metric(truth, probs)}`` of each candidate's test windows, where the folder holds the
        answers (``solution.csv``: a stand-in's, or a finished competition's); {} where it does not."""
        solution = self.folder / "solution.csv"
        if not (solution.exists() and len(row_ids)):
            return {}
        truth = csvfile.read(solution, dtype={"row_id": str}).set_index("row_id").loc[row_ids, self.classes].to_numpy()
        return {f"test_{name}": metric(truth, probs) for name, probs in candidates.items()}


def read_competition(folder: Path | str) -> AudioCompetition:
    """The competition in ``folder`` (see the module)."""
    folder = Path(folder)
    for name in ("train.csv", "sample_submission.csv"):
        if not (folder / name).exists():
            raise AudioDataError(f"{folder} has no {name}: a BirdCLEF-style folder holds train.csv, "
                                 "train_audio/, test_soundscapes/ and sample_submission.csv")
    sample = folder / "sample_submission.csv"
    columns = [str(c) for c in csvfile.read(sample, rows_needed=False, nrows=0, dtype=str).columns]
    if columns[:1] != ["row_id"] or len(columns) < 3:
        raise AudioDataError(f"{sample}: its columns are {columns[:4]}...: expected row_id, then a probability "
                             "column per species")
    classes = columns[1:]
    index = {c: k for k, c in enumerate(classes)}
    table = csvfile.read(folder / "train.csv", dtype=str, keep_default_na=False)
    for needed in ("primary_label", "filename"):
        if needed not in table.columns:
            raise AudioDataError(f"train.csv has no column {needed!r}; its columns: {', '.join(table.columns)}")
    answered, note = tablecheck.labelled(table.primary_label, "primary_label", AudioDataError, False, parameter="")
    notice(note) if note else None
    table = table[answered]
    unknown = sorted(set(table.primary_label) - set(index))
    if unknown:
        raise AudioDataError(f"train.csv's primary_label {unknown[:5]} are not columns of sample_submission.csv: "
                             "the submission could not score them (is it the same competition's sample?)")
    audio = folder / "train_audio"
    exists = [(audio / name).exists() for name in table.filename]
    dropped = [name for name, ok in zip(table.filename, exists) if not ok]
    table = table[exists]
    bad = filecheck.problems([audio / n for n in table.filename], filecheck.audio_problem)  # before any decoding
    unreadable = [f"{table.filename.iloc[i]} ({why})" for i, why in bad.items()]
    table = table.iloc[[i for i in range(len(table)) if i not in bad]]
    secondary, unknown_secondary = [], 0
    for text in table.get("secondary_labels", [""] * len(table)):
        names = parse_labels(text)
        secondary.append([index[n] for n in names if n in index])
        unknown_secondary += sum(n not in index for n in names)
    soundscapes = _audio_files(folder / "test_soundscapes")
    filecheck.refuse_test_files(soundscapes, filecheck.problems(soundscapes, filecheck.audio_problem), AudioDataError,
                                "test soundscapes")
    pool = _audio_files(folder / "train_soundscapes")
    bad_pool = filecheck.problems(pool, filecheck.audio_problem)  # unlabelled: a bad one is dropped, said
    unreadable += [f"train_soundscapes/{pool[i].name} ({why})" for i, why in bad_pool.items()]
    return AudioCompetition(folder, classes, [audio / n for n in table.filename],
                            np.array([index[p] for p in table.primary_label], np.int64), secondary, soundscapes,
                            sample, dropped, unknown_secondary, unreadable,
                            [p for i, p in enumerate(pool) if i not in bad_pool])


def _audio_files(folder: Path) -> list[Path]:
    """The recordings in ``folder`` (none when it is missing), sorted; stray files ignored."""
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in AUDIO) if folder.is_dir() else []


def parse_labels(text: str) -> list[str]:
    """A ``secondary_labels`` cell as its labels: ``"['a', 'b']"`` -> ["a", "b"]; ``"[]"``,
    ``"['']"`` and an empty cell -> []. Never ``eval``: ``ast.literal_eval`` reads literals only."""
    text = str(text).strip()
    if not text:
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as err:
        raise AudioDataError(f"secondary_labels {text[:60]!r} is not a list of labels like \"['a', 'b']\"") from err
    return [str(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if str(v)]


def decode(path: Path | str, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """One recording as mono float32 at ``sample_rate`` (see the module)."""
    import soundfile
    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    wave = data.mean(axis=1)
    if rate != sample_rate:
        from scipy.signal import resample_poly
        g = math.gcd(int(rate), int(sample_rate))
        wave = resample_poly(wave, sample_rate // g, int(rate) // g).astype(np.float32)
    return wave


def as_int16(wave: np.ndarray) -> np.ndarray:
    return np.clip(np.round(wave * 32767.0), -32768, 32767).astype(np.int16)


def clip_windows(path: Path | str, count: int, sample_rate: int = SAMPLE_RATE,
                 window_s: float = WINDOW_S) -> np.ndarray:
    """The first ``count`` windows of a training recording, (k, samples) int16 with k <= count: a
    recording shorter than a window is repeated to fill it (calls recur; silence would teach the
    model that quiet means this species), the last partial window of a longer one dropped."""
    wave, size = decode(path, sample_rate), int(window_s * sample_rate)
    if len(wave) == 0:
        raise AudioDataError(f"{path}: no samples")
    if len(wave) < size:
        wave = np.tile(wave, -(-size // len(wave)))
    k = min(count, len(wave) // size)
    return as_int16(wave[:k * size].reshape(k, size))


def soundscape_windows(path: Path | str, sample_rate: int = SAMPLE_RATE,
                       window_s: float = WINDOW_S) -> tuple[np.ndarray, list[str]]:
    """Every window of a soundscape, (k, samples) int16 (the last one padded with silence), and
    its row ids: ``<file stem>_<end second>`` (``soundscape_1745_5`` ... ``_60``)."""
    wave, size = decode(path, sample_rate), int(window_s * sample_rate)
    k = max(1, -(-len(wave) // size))
    padded = np.zeros(k * size, np.float32)
    padded[:len(wave)] = wave
    ends = [f"{Path(path).stem}_{round((i + 1) * window_s)}" for i in range(k)]
    return as_int16(padded.reshape(k, size)), ends


def decode_soundscapes(paths: list[Path], sample_rate: int = SAMPLE_RATE, window_s: float = WINDOW_S,
                       workers: int = 1, transform=None) -> dict:
    """Every window of every soundscape (``soundscape_windows``) in one tensor (``"windows"``: int16
    waves, or ``transform``'s features of them, applied a soundscape at a time as in ``decode_windows``:
    a pool of ten thousand minutes never held as waves), their ``"row_ids"``, and one core's
    ``"seconds_each"`` per soundscape (what a scoring rerun's plan scales)."""
    import torch
    started, size = time.monotonic(), int(window_s * sample_rate)
    transform = transform or (lambda waves: waves)
    parts, row_ids = [np.asarray(transform(np.zeros((1, size), np.int16)))[:0]], []  # the features' shape, no row
    cut = functools.partial(soundscape_windows, sample_rate=sample_rate, window_s=window_s)
    for waves, ids in each_decoded(paths, cut, workers):
        parts.append(np.asarray(transform(waves)))
        row_ids += ids
    return {"windows": torch.from_numpy(np.concatenate(parts)), "row_ids": row_ids,
            "seconds_each": (time.monotonic() - started) * workers / max(1, len(paths))}


def window_count(path: Path | str, count: int, sample_rate: int = SAMPLE_RATE, window_s: float = WINDOW_S) -> int:
    """How many windows ``clip_windows`` cuts from a recording, from its header alone (no decoding)."""
    import soundfile
    info = soundfile.info(str(path))
    if info.frames <= 0:
        raise AudioDataError(f"{path}: no samples")
    samples = math.ceil(info.frames * sample_rate / info.samplerate)  # resample_poly's length
    return max(1, min(count, samples // int(window_s * sample_rate)))  # a short one repeated to one window


def window_counts(paths: list[Path], count: int, sample_rate: int = SAMPLE_RATE, window_s: float = WINDOW_S,
                  workers: int = 1) -> list[int]:
    """``window_count`` of every recording, in worker processes."""
    return decode_all(paths, functools.partial(window_count, count=count, sample_rate=sample_rate,
                                               window_s=window_s), workers)


def check_windows_fit(counts: list[int], window_bytes: int, room: dict[str, int], parameter: str = "windows_per_clip",
                      count: int | None = None) -> int:
    """The bytes of the training windows (one array, ``decode_windows``, ``window_bytes`` each);
    refused, naming ``parameter`` and the largest value that fits, when they pass any of ``room``
    (what holds them -> its bytes: the memory, the saved output that caches them): a kernel killed
    for memory minutes into the decoding says nothing, and an output over Kaggle's limit is lost."""
    def size(k: int) -> int:
        return sum(min(c, k) for c in counts) * window_bytes
    needed, gb = size(max(counts, default=1)), 2 ** 30
    where, available = min(room.items(), key=lambda item: item[1])
    if needed <= available:
        return needed
    top = count or max(counts, default=1)
    fits = max((k for k in range(1, top) if size(k) <= available), default=0)
    raise AudioDataError(
        f"{sum(counts):,} training windows of {window_bytes / 2**10:,.0f} KB take {needed / gb:.1f} GB, more than "
        f"the {available / gb:.1f} GB of {where}: "
        + (f"lower {parameter} to {fits} or less" if fits else
           f"even {parameter}=1 needs {size(1) / gb:.1f} GB: train on a share of the recordings"))


def check_decoding_fits(paths: list[Path], count: int, sample_rate: int, window_s: float, workers: int,
                        transform, output_dir: Path) -> int:
    """``check_windows_fit`` before one recording is decoded: the windows counted from the files'
    headers, a window's bytes from ``transform``'s output, against the memory and what ``output_dir``
    can still keep (a kernel killed for memory says nothing; a version whose output passes Kaggle's
    ~20 GB loses it, the decoded windows' cache with it)."""
    from ..machine.env import available_memory
    from ..state.space import room_to_keep
    counts = window_counts(paths, count, sample_rate, window_s, workers)
    window_bytes = np.asarray(transform(np.zeros((1, int(sample_rate * window_s)), np.int16))).nbytes
    room = {"memory": available_memory(), "output kept": room_to_keep(output_dir)}
    return check_windows_fit(counts, window_bytes, room, count=count)


def decode_windows(paths: list[Path], count: int, sample_rate: int = SAMPLE_RATE, window_s: float = WINDOW_S,
                   workers: int = 1, transform=None, batch: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Every recording's first ``count`` windows (``clip_windows``) in one array, and each window's
    recording. The array is sized from the headers first and filled as the workers hand each
    recording back: the parts are never all held beside it (that doubled the peak).

    ``transform``: (k, samples) int16 windows -> (k, ...) features (a log-mel spectrogram), applied
    ``batch`` windows at a time as they arrive; the array then holds its outputs and the waves are
    never all held (BirdCLEF's recordings take tens of GB as waves, a quarter of that or less as
    float16 spectrograms). Without it the array holds the int16 waves."""
    counts = window_counts(paths, count, sample_rate, window_s, workers)
    starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    size = int(window_s * sample_rate)
    transform = transform or (lambda waves: waves)
    probe = np.asarray(transform(np.zeros((1, size), np.int16)))  # the features' shape and type
    out = np.empty((int(starts[-1]), *probe.shape[1:]), probe.dtype)
    cut = functools.partial(clip_windows, count=count, sample_rate=sample_rate, window_s=window_s)
    pending: list[np.ndarray] = []
    filled = 0
    for i, part in enumerate(each_decoded(paths, cut, workers)):
        if len(part) != counts[i]:
            raise AudioDataError(f"{paths[i]}: {len(part)} windows decoded where its header said {counts[i]}")
        pending.append(part)
        if starts[i + 1] - filled >= batch or i == len(paths) - 1:
            out[filled:starts[i + 1]] = transform(np.concatenate(pending))
            pending, filled = [], int(starts[i + 1])
    return out, np.repeat(np.arange(len(paths)), counts)
