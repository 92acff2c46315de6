"""How long does the Vesuvius leaderboard score take on a competition-sized volume?

A 320^3 label (the competition's usual chunk) holding several wavy papyrus sheets, 3 voxels
thick, a slab unlabelled (2), and a prediction of it that a U-Net could make: shifted a voxel,
cut through, holed, with false specks. Times ``surfacescore.vesuvius_score`` and each of its
parts, against the voxel Dice the notebook computed before (``segment3d.dice``), in the same run.

With ``--reference DIR`` (a folder holding DeepMind's ``surface_distance`` package, the one the
competition's metric calls: ``pip download --no-deps surface-distance==0.1`` and unzip), its
surface Dice is computed beside ours on random wavy sheets, and the largest difference printed.
"""
from __future__ import annotations

import argparse
import sys
import time
import types

import numpy as np
import torch

from kagglekit import segment3d, surfacescore


def sheets(n: int, layers: int, thick: int, rng, shift: int = 0) -> np.ndarray:
    """``layers`` wavy sheets across an n^3 volume, ``thick`` voxels each."""
    volume = np.zeros((n, n, n), bool)
    y, x = np.mgrid[:n, :n]
    for layer in range(layers):
        amp, period, phase = rng.uniform(3, 10), rng.uniform(20, 60), rng.uniform(0, 6)
        base = (layer + 1) * n // (layers + 1) + shift
        z = (base + amp * np.sin(x / period + phase) * np.cos(y / (1.3 * period))).astype(int)
        for t in range(thick):
            volume[np.clip(z + t, 0, n - 1), y, x] = True
    return volume


def competition_pair(n: int = 320, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = sheets(n, 4, 3, rng)
    label = truth.astype(np.uint8)
    label[:, :, : n // 8] = 2  # an unlabelled slab
    pred = np.roll(truth, 1, axis=0)
    pred[:, :, n // 3] = False  # a cut through every sheet
    pred[:, n // 5: n // 5 + 4, n // 5: n // 5 + 4] = False  # holes
    pred |= rng.random(pred.shape) > 0.99995  # specks
    return pred.astype(np.uint8), label


def timed(fn, *args, repeat: int = 2) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - started)
    return best, out


def speed(n: int) -> None:
    pred, label = competition_pair(n)
    p, g = (pred != 0) & (label != 2), label == 1
    dice_s, dice = timed(segment3d.dice, torch.from_numpy(pred), torch.from_numpy(label))
    total_s, score = timed(surfacescore.vesuvius_score, pred, label)
    print(f"{n}^3 volume: score {score['score']:.3f} (topo {score['topo']:.3f}, surface Dice "
          f"{score['surface_dice']:.3f}, VOI {score['voi']:.3f}); voxel Dice {dice:.3f}")
    print(f"  vesuvius_score {total_s:.2f} s per volume ({total_s / dice_s:.0f}x the voxel Dice's {dice_s:.3f} s)")
    for name in ("topo_score", "surface_dice", "voi_score"):
        seconds, _ = timed(getattr(surfacescore, name), p, g)
        print(f"  {name:13s} {seconds:.2f} s")


def against_reference(folder: str, cases: int = 12) -> None:
    sys.path.insert(0, folder)
    absl = types.ModuleType("absl")  # the package imports absl.logging for one warning
    absl.logging = types.SimpleNamespace(warning=print)
    sys.modules.setdefault("absl", absl)
    sys.modules.setdefault("absl.logging", absl.logging)
    import surface_distance
    rng, worst = np.random.default_rng(1), 0.0
    for case in range(cases):
        g = sheets(64, 1 + case % 3, int(rng.integers(1, 4)), rng)
        p = sheets(64, 1 + case % 3, int(rng.integers(1, 4)), rng, shift=int(rng.integers(-3, 4)))
        if case % 3 == 0:
            p &= rng.random(p.shape) > 0.2
        distances = surface_distance.compute_surface_distances(g, p, (1.0, 1.0, 1.0))
        ref = surface_distance.compute_surface_dice_at_tolerance(distances, surfacescore.TAU)
        ours = surfacescore.surface_dice(p, g)
        worst = max(worst, abs(ref - ours))
        print(f"  case {case:2d}: reference {ref:.4f}, ours {ours:.4f}")
    print(f"surface Dice against DeepMind's surface-distance: largest difference {worst:.4f} in {cases} cases")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--reference", help="folder holding the surface_distance package")
    args = parser.parse_args()
    speed(args.size)
    if args.reference:
        against_reference(args.reference)


if __name__ == "__main__":
    main()
