"""The audio notebook's training windows: kept as int16 waves against float16 log-mel spectrograms.

BirdCLEF ships tens of thousands of recordings; at the audio kernel's Kaggle parameters (6 windows
of 5 s per recording at 32 kHz, 128 mels, n_fft 2048, hop 512) a window is 312.5 KB as int16 waves
and 78.3 KB as a float16 spectrogram. This decodes the same recordings both ways with
``kk.audio.decode_windows`` (one process each, so each peak is its own) and prints each one's
array, peak resident memory and seconds, and the ratios: what the memory check and the 29 GB of a
T4 x2 machine see. The recordings: Ogg Vorbis of 2 to 90 s (a tone in noise), written once.

    python benchmarks/audio_windows.py [--recordings 1000] [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SAMPLE_RATE, WINDOWS, N_MELS, N_FFT, HOP = 32000, 6, 128, 2048, 512  # the Kaggle parameters


def write_recordings(folder: Path, count: int) -> list[Path]:
    import soundfile
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        seconds = float(rng.choice([2.0, 8.0, 17.0, 31.0, 45.0, 90.0]))
        t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
        wave = 0.3 * np.sin(2 * np.pi * rng.uniform(1000, 8000) * t) + 0.05 * rng.standard_normal(len(t))
        path = folder / f"XC{i:06d}.ogg"
        with soundfile.SoundFile(path, "w", SAMPLE_RATE, 1, format="OGG", subtype="VORBIS") as out:
            for start in range(0, len(wave), 10 * SAMPLE_RATE):  # libsndfile crashed writing 90 s at once
                out.write(wave[start:start + 10 * SAMPLE_RATE].astype(np.float32))
        paths.append(path)
    return paths


def measure(mode: str, folder: Path, workers: int) -> dict:
    """One way, in this process: its array's bytes, the peak RSS and the seconds."""
    import torch

    import kagglekit as kk
    torch.set_num_threads(1)
    paths = sorted(folder.glob("*.ogg"))
    transform = None
    if mode == "spectrograms":
        spectrogram = kk.mel.LogMel(SAMPLE_RATE, N_FFT, HOP, N_MELS, 50.0, 14000.0)

        def transform(waves):  # as the notebook's to_spectrograms, 32 windows at a time
            with torch.no_grad():
                return torch.cat([spectrogram(torch.from_numpy(waves[i:i + 32]) / 32768).half()
                                  for i in range(0, len(waves), 32)]).numpy()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    array, clip = kk.audio.decode_windows(paths, WINDOWS, SAMPLE_RATE, 5.0, workers, transform=transform)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"mode": mode, "windows": len(clip), "shape": list(array.shape[1:]), "dtype": str(array.dtype),
            "array_mb": array.nbytes / 2**20, "peak_mb": peak / 2**10, "grown_mb": (peak - before) / 2**10,
            "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--measure", choices=["waves", "spectrograms"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # a child: one way, its own peak
        print(json.dumps(measure(args.measure, args.folder, args.workers)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "train_audio"
        write_recordings(folder, args.recordings)
        rows = {}
        for mode in ("waves", "spectrograms"):
            done = subprocess.run([sys.executable, __file__, "--measure", mode, "--folder", str(folder),
                                   "--workers", str(args.workers)], capture_output=True, text=True, check=True)
            rows[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    for row in rows.values():
        print(f"{row['mode']:>12}: {row['windows']:,} windows {row['shape']} {row['dtype']}, array "
              f"{row['array_mb']:,.1f} MB, peak RSS {row['peak_mb']:,.1f} MB (+{row['grown_mb']:,.1f} while decoding), "
              f"{row['seconds']:.1f} s")
    waves, specs = rows["waves"], rows["spectrograms"]
    print(f"spectrograms over waves: array x{specs['array_mb'] / waves['array_mb']:.3f}, growth while decoding "
          f"x{specs['grown_mb'] / waves['grown_mb']:.3f}, seconds x{specs['seconds'] / waves['seconds']:.3f} "
          f"(the spectrograms on this CPU; on Kaggle the notebook computes them on a T4)")


if __name__ == "__main__":
    main()
