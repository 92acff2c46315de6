"""A BirdCLEF-style competition written from synthetic calls: the layout and quirks of the real
one (``audio.folder``), sounds a small model can learn on a CPU.

No public labelled animal-sound set ships inside a pip package, so the sounds are made: each
species has a call (syllables that sweep between its own frequencies, at its own length and
rhythm; insects a steady pulsed buzz, amphibians low pulses), species pairs sharing a band so that
the pattern, not the pitch alone, tells them apart. Recordings hold a species' calls at a random
loudness over pink background noise, sometimes with a quieter second species; soundscapes are a
minute of louder noise where a few species call now and then, fainter than in the recordings
(BirdCLEF's domain shift: focal recordings to train, passive soundscapes to score).

The quirks, as in BirdCLEF 2025's files:
- labels are eBird codes beside numeric iNaturalist ids (``"1139490"``); the submission's columns
  are ``taxonomy.csv``'s labels, sorted as text (digits first);
- ``secondary_labels`` are list strings: ``[]``, ``['']``, and now and then a species the
  taxonomy lacks; a background species is not always listed (the recordist did not note it);
- two species of the taxonomy have no recording, one has a single one;
- recordings from 1.5 s to 40 s; file names ``XC<n>.ogg``, ``iNat<n>.ogg``, ``CSA<n>.ogg`` in a
  folder per primary label; extra columns (type, rating, url, latitude, longitude, names, author,
  license); one ``filename`` whose file is missing;
- Ogg Vorbis, mono, 32 kHz; soundscapes of 60 s named ``soundscape_<n>.ogg``, scored per 5-second
  window; ``public=True`` leaves ``test_soundscapes/`` empty, as Kaggle's public data is, and the
  sample's rows then name soundscapes that do not exist;
- ``train_soundscapes/``: unlabelled one-minute soundscapes of the test's kind, named by recorder,
  date and time (``H02_20230420_074000.ogg``), as BirdCLEF 2025 ships 9,726 of them: no table lists
  them and nothing says what calls in them (the pool a teacher labels for its student).
``solution.csv`` (row_id, a 0/1 column per species) holds what each test window contains.
"""
from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np

from ..state import atomic
from .folder import SAMPLE_RATE, WINDOW_S

# (label, class, (low Hz, high Hz), syllable s, syllables per call, kind); pairs share a band
SPECIES = (
    ("bkcdon", "Aves", (2500, 4200), 0.12, 4, "up"),
    ("grekis", "Aves", (2500, 4200), 0.25, 2, "down"),
    ("rufmot1", "Aves", (900, 1600), 0.30, 3, "down"),
    ("yehcar1", "Aves", (5200, 7800), 0.06, 6, "up"),
    ("strcuc1", "Aves", (5200, 7800), 0.18, 2, "updown"),
    ("1139490", "Insecta", (6000, 6400), 0.80, 1, "buzz"),
    ("476537", "Amphibia", (500, 900), 0.05, 5, "pulse"),
    ("65419", "Amphibia", (900, 1600), 0.09, 3, "pulse"),
)
NO_RECORDINGS = (("24292", "Amphibia"), ("trokin", "Aves"))
OUTSIDE_TAXONOMY = "comrav"


def write_competition(folder: Path | str, seed: int = 0, recordings: int = 64, soundscapes: int = 6,
                      public: bool = False, pool: int = 4) -> Path:
    """The competition in ``folder``, written whole or not at all, once (see the module); ``pool``
    unlabelled train soundscapes."""
    return atomic.write_once(folder, _write_all, np.random.default_rng(seed), recordings, soundscapes, public, pool)


def _write_all(partial: Path, rng, recordings: int, soundscapes: int, public: bool, pool: int) -> None:
    _write_taxonomy(partial)
    _write_train(partial, rng, recordings)
    _write_test(partial, rng, soundscapes, public)
    _write_pool(partial, rng, pool)  # last: the files before it are the same bytes as without a pool


def call(kind: str, band: tuple[int, int], syllable_s: float, syllables: int, rng) -> np.ndarray:
    """One call of a species, float32 at 32 kHz, peak about 1."""
    parts = []
    for _ in range(syllables):
        n = int(syllable_s * rng.uniform(0.85, 1.15) * SAMPLE_RATE)
        t = np.arange(n) / SAMPLE_RATE
        low, high = band
        sweep = {"up": np.linspace(low, high, n), "down": np.linspace(high, low, n),
                 "updown": np.interp(t, [0, t[-1] / 2, t[-1]], [low, high, low]),
                 "buzz": np.full(n, (low + high) / 2), "pulse": np.full(n, (low + high) / 2)}[kind]
        tone = np.sin(2 * np.pi * np.cumsum(sweep) / SAMPLE_RATE)
        if kind == "buzz":  # an insect's stridulation: the tone pulsed at 40 Hz
            tone *= 0.5 + 0.5 * np.sign(np.sin(2 * np.pi * 40 * t))
        else:
            tone += 0.3 * np.sin(4 * np.pi * np.cumsum(sweep) / SAMPLE_RATE)  # a harmonic
        parts += [tone * np.hanning(n), np.zeros(int(syllable_s * 0.6 * SAMPLE_RATE))]
    return (np.concatenate(parts) / 1.3).astype(np.float32)


def pink_noise(n: int, rng) -> np.ndarray:
    """Noise whose power falls as 1/f (wind, leaves, distant traffic), unit RMS."""
    from scipy.fft import irfft, next_fast_len, rfft
    m = next_fast_len(n, real=True)  # a length of small factors: an awkward n is a hundred times slower
    spectrum = rfft(rng.standard_normal(m))
    spectrum /= np.sqrt(np.maximum(np.arange(len(spectrum)), 1))
    noise = irfft(spectrum, m)[:n]
    return (noise / (noise.std() + 1e-12)).astype(np.float32)


def _scene(seconds: float, noise: float, calls: list[tuple[int, float]], rng) -> tuple[np.ndarray, list]:
    """``seconds`` of noise at RMS ``noise`` with calls of (species index, loudness) at random
    times; returns the wave and the (species, start s, end s) of each call."""
    n = int(seconds * SAMPLE_RATE)
    wave, events = pink_noise(n, rng) * noise, []
    for species, loudness in calls:
        _, _, band, syllable_s, syllables, kind = SPECIES[species]
        sound = call(kind, band, syllable_s, syllables, rng)[:n]
        start = int(rng.integers(0, n - len(sound) + 1))
        wave[start:start + len(sound)] += loudness * sound
        events.append((species, start / SAMPLE_RATE, (start + len(sound)) / SAMPLE_RATE))
    return np.clip(wave, -1, 1), events


def write_ogg(path: Path, wave: np.ndarray) -> None:
    """``wave`` as Ogg Vorbis at 32 kHz, the same bytes for the same wave: libsndfile draws each
    stream's serial number from the clock, so every page's serial is set from the file's name and
    its checksum recomputed (a stand-in written again in the next kernel version must hash alike,
    or its units would train again)."""
    import soundfile
    soundfile.write(path, wave, SAMPLE_RATE, format="OGG", subtype="VORBIS")
    data, at = bytearray(path.read_bytes()), 0
    serial = zlib.crc32(path.name.encode()).to_bytes(4, "little")
    while at < len(data):
        if data[at:at + 4] != b"OggS":
            raise ValueError(f"{path}: not an Ogg page at byte {at}")
        segments = data[at + 26]
        size = 27 + segments + sum(data[at + 27:at + 27 + segments])
        data[at + 14:at + 18], data[at + 22:at + 26] = serial, bytes(4)
        data[at + 22:at + 26] = _ogg_crc(bytes(data[at:at + size])).to_bytes(4, "little")
        at += size
    path.write_bytes(bytes(data))


_REVERSED = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def _ogg_crc(page: bytes) -> int:
    """Ogg's page checksum (CRC-32, polynomial 0x04C11DB7, not reflected, initial value 0), by
    zlib's reflected CRC-32 on the bit-reversed bytes."""
    raw = ~zlib.crc32(page.translate(_REVERSED), 0xFFFFFFFF) & 0xFFFFFFFF
    return int(f"{raw:032b}"[::-1], 2)


def _write_taxonomy(out: Path) -> None:
    import pandas as pd
    rows = [(label, kind) for label, kind, *_ in SPECIES] + list(NO_RECORDINGS)
    pd.DataFrame({"primary_label": [r[0] for r in rows], "inat_taxon_id": [1000 + i for i in range(len(rows))],
                  "scientific_name": [f"Species {r[0]}" for r in rows],
                  "common_name": [f"Common {r[0]}" for r in rows],
                  "class_name": [r[1] for r in rows]}).to_csv(out / "taxonomy.csv", index=False)


def _write_train(out: Path, rng, recordings: int) -> None:
    import pandas as pd
    weights = np.linspace(2.0, 0.6, len(SPECIES))  # a long tail, as in every BirdCLEF
    primary = [0, 0] + list(rng.choice(len(SPECIES) - 1, recordings - 3, p=weights[:-1] / weights[:-1].sum()))
    primary.append(len(SPECIES) - 1)  # the last species: one recording
    rows = []
    for i, species in enumerate(primary):
        seconds = float(np.clip(rng.lognormal(2.0, 0.8), 1.5, 40.0)) if i else 1.5  # the first: shorter than 5 s
        calls = [(species, rng.uniform(0.3, 0.8)) for _ in range(max(1, int(seconds / rng.uniform(1.5, 3.0))))]
        background = int(rng.integers(len(SPECIES))) if rng.random() < 0.3 else species
        if background != species:
            calls += [(background, rng.uniform(0.08, 0.2)) for _ in range(max(1, int(seconds / 6)))]
        wave, _ = _scene(seconds, rng.uniform(0.02, 0.08), calls, rng)
        label = SPECIES[species][0]
        name = f"{('XC', 'iNat', 'CSA')[i % 3]}{int(rng.integers(10_000, 999_999))}.ogg"
        (out / "train_audio" / label).mkdir(parents=True, exist_ok=True)
        write_ogg(out / "train_audio" / label / name, wave)
        listed = [SPECIES[background][0]] if background != species and rng.random() < 0.7 else []
        listed += [OUTSIDE_TAXONOMY] if i % 17 == 5 else []
        rows.append(_row(label, listed, f"{label}/{name}", i))
    rows.append(_row(SPECIES[1][0], [], f"{SPECIES[1][0]}/XC000001.ogg", len(rows)))  # listed, not shipped
    pd.DataFrame(rows).to_csv(out / "train.csv", index=False)


def _row(label: str, secondary: list[str], filename: str, i: int) -> dict:
    return {"primary_label": label, "secondary_labels": str(secondary) if secondary or i % 2 else "['']",
            "type": "['call']", "filename": filename, "collection": re.sub(r"\d+\.ogg$", "", filename.split("/")[1]),
            "rating": (0.0, 3.5, 4.0, 5.0)[i % 4], "url": f"https://xeno-canto.org/{i}", "latitude": 6.5 + i % 3,
            "longitude": -74.0 - i % 5, "scientific_name": f"Species {label}", "common_name": f"Common {label}",
            "author": f"recordist{i % 7}", "license": "cc-by-nc-sa 4.0"}


def _write_test(out: Path, rng, soundscapes: int, public: bool) -> None:
    import pandas as pd
    columns = sorted([s[0] for s in SPECIES] + [n[0] for n in NO_RECORDINGS])
    (out / "test_soundscapes").mkdir()
    solution = []
    for _ in range(soundscapes):
        calls = [(int(rng.integers(len(SPECIES))), rng.uniform(0.1, 0.35)) for _ in range(int(rng.integers(4, 10)))]
        wave, events = _scene(60.0, 0.1, calls, rng)
        stem = f"soundscape_{int(rng.integers(100_000, 999_999))}"
        if not public:
            write_ogg(out / "test_soundscapes" / f"{stem}.ogg", wave)
        for w in range(60 // WINDOW_S):
            row = {"row_id": f"{stem}_{(w + 1) * WINDOW_S}", **{c: 0 for c in columns}}
            for species, start, end in events:  # a call in the window for at least a tenth of a second
                if min(end, (w + 1) * WINDOW_S) - max(start, w * WINDOW_S) >= 0.1:
                    row[SPECIES[species][0]] = 1
            solution.append(row)
    frame = pd.DataFrame(solution, columns=["row_id", *columns])
    sample = frame.head(3 * 60 // WINDOW_S).copy()
    sample[columns] = 1 / len(columns)
    sample.to_csv(out / "sample_submission.csv", index=False)
    if not public:
        frame.to_csv(out / "solution.csv", index=False)


def _write_pool(out: Path, rng, soundscapes: int) -> None:
    """Unlabelled soundscapes, drawn as the test's are (a few species now and then over louder noise)."""
    (out / "train_soundscapes").mkdir()
    for i in range(soundscapes):
        calls = [(int(rng.integers(len(SPECIES))), rng.uniform(0.1, 0.35)) for _ in range(int(rng.integers(4, 10)))]
        wave, _ = _scene(60.0, 0.1, calls, rng)
        write_ogg(out / "train_soundscapes" / f"H{2 + i % 3:02d}_202304{20 + i:02d}_0{7 + i % 2}4000.ogg", wave)
