"""Can the segmentation notebook's patch loader feed its T4 on LZW volumes of the real size?

Writes LZW-compressed 320^3 volumes in the Vesuvius layout (as the competition ships them),
then measures patches/s from one rank's loader as the notebook builds it on Kaggle
(``segment3d.Patches`` through ``kk.make_loader``, patch 96, batch 4: the Kaggle parameters)
with the worker count ``loaders.workers_per_process`` gives each of the two ranks on Kaggle's 4
vCPUs (one), against what one T4 consumes; and, for comparison, one loader with 4 workers
against both T4s (the figure recorded before 2026-11-24). Each in the same run, twice:

- before: every crop decodes the LZW pages it touches (Pillow, as in Kaggle's image);
- after: ``VolumeCache`` decodes each volume once into an uncompressed .npy, crops read bytes.

What two T4s consume: the notebook's U-Net (its own cell, Kaggle's width 16 and depth 3) costs
F FLOPs per patch for a forward and backward (``torch.utils.flop_counter``); a T4 sustains
about 24 TFLOPS in fp16 (``kk.cards.T4.fp16_flops``, with its source). 3-D convolutions
reach less than a large GEMM, so 24e12 / F patches/s per T4 is an upper bound on the demand:
a ratio >= 1 against it means the GPU, not the loader, sets the pace.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import kagglekit as kk

REPO = Path(__file__).resolve().parents[1]
T4_FP16_FLOPS = kk.cards.T4.fp16_flops  # sustained, per card (machine/cards.py: its source)


def notebook_unet():
    """The notebook's UNet3D, from its own cell."""
    ns = {"torch": torch, "nn": nn, "F": F}
    for cell in json.loads((REPO / "notebooks" / "segmentation_3d.ipynb").read_text())["cells"]:
        source = "".join(cell["source"])
        if "class UNet3D(" in source:
            exec(compile(source, "segmentation_3d.ipynb", "exec"), ns)
    return ns["UNet3D"]


def flops_per_patch(unet, patch: int, width: int, depth: int) -> float:
    from torch.utils.flop_counter import FlopCounterMode
    model = unet(width, depth)
    x = torch.randn(1, 1, patch, patch, patch)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return float(counter.get_total_flops())


def write_volumes(folder: Path, count: int, edge: int) -> kk.volumes.VesuviusLayout:
    train = {f"{1000000000 + i}": kk.volumes.synthetic_chunk(edge, i) for i in range(count)}
    kk.volumes.write_layout(folder, train, {}, compress="lzw")
    return kk.volumes.read_layout(folder)


def patches_per_s(layout, cache, patch: int, batch: int, workers: int, patches: int) -> float:
    ids = layout.train_ids
    layout.cache = cache
    data = kk.segment3d.Patches([layout.image(v) for v in ids], [layout.label(v) for v in ids],
                                patch, patches, seed=0)
    return samples_per_s(kk.make_loader(data, batch, seed=0, num_workers=workers))


def samples_per_s(loader) -> float:
    """Samples/s over an epoch of ``loader``: the median of two, after one that warms the workers
    (and decodes what a cache keeps)."""
    rates = []
    for epoch in range(3):
        kk.loaders.start_epoch(loader, epoch)
        started = time.perf_counter()
        seen = sum(len(x) for x, _ in loader)
        rates.append(seen / (time.perf_counter() - started))
    return statistics.median(rates[1:])


def main() -> None:
    import warnings
    # torch suggests no more workers than cores; 4 is the old comparison on Kaggle's 4 vCPUs
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--volumes", type=int, default=4)
    ap.add_argument("--edge", type=int, default=320)
    ap.add_argument("--patches", type=int, default=96, help="patches per timed epoch")
    ap.add_argument("--cpus", type=int, default=4, help="Kaggle's T4 x2 vCPUs")
    ap.add_argument("--gpus", type=int, default=2)
    args = ap.parse_args()
    params = json.loads((REPO / "kernel-metadata" / "segmentation_3d.json").read_text())["parameters"]
    patch, batch = params["patch"], params["batch_size"]
    flops = flops_per_patch(notebook_unet(), patch, params["width"], params["depth"])
    per_t4 = T4_FP16_FLOPS / flops
    notebook_workers = kk.loaders.workers_per_process(args.gpus, args.cpus)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kk-patches-") as tmp:
        layout = write_volumes(Path(tmp) / "comp", args.volumes, args.edge)
        cache = kk.volumes.VolumeCache(Path(tmp) / "cache")
        patches_per_s(layout, cache, patch, batch, 1, 16)  # decode once, outside the timings
        for workers, gpus in ((notebook_workers, 1), (4, args.gpus)):
            before = patches_per_s(layout, None, patch, batch, workers, args.patches)
            after = patches_per_s(layout, cache, patch, batch, workers, args.patches)
            rows.append((workers, gpus, before, after, gpus * per_t4))
    print(f"U-Net (width {params['width']}, depth {params['depth']}), patch {patch}^3: "
          f"{flops / 1e9:.1f} GFLOP per patch, forward + backward; a T4 at "
          f"{T4_FP16_FLOPS / 1e12:.0f} TFLOPS fp16 consumes at most {per_t4:.1f} patches/s")
    print(f"loader, {args.volumes} LZW volumes of {args.edge}^3, batch {batch}:")
    for workers, gpus, before, after, demand in rows:
        what = ("the notebook's: one rank of two on 4 vCPUs" if gpus == 1 else
                "one loader for both T4s")
        print(f"  {workers} worker(s), {what} (demand {demand:.1f} patches/s):")
        print(f"    decoded per crop: {before:8.1f} patches/s   ratio {before / demand:.2f}")
        print(f"    decoded once    : {after:8.1f} patches/s   ratio {after / demand:.2f}"
              f"   (goal >= 1)   cache speed-up {after / before:.1f}x")


if __name__ == "__main__":
    main()
