"""What does 3-D augmentation cost the segmentation notebook's training?

``Augment3d`` runs on the batch after it reaches the device, so the loader (and Kaggle's 4
vCPUs) does exactly the work it did without it: by construction, patches/s from the loader are
unchanged. What it adds is work in the training step. Measured here in the same run, on this
machine's CPU:

- patches/s through the notebook's own U-Net step (forward, loss, backward, AdamW), without and
  with ``Augment3d()``: the ratio is what a user pays for augmentation;
- the augmentation alone on a batch of Kaggle's size (4 patches of 96^3) on this CPU, against
  the least time a T4 needs for the U-Net's step at that size (its FLOPs at 24 TFLOPS, as
  patch_loader.py counts them): on the GPU the augmentation is only cheaper than here.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from patch_loader import T4_FP16_FLOPS, flops_per_patch, notebook_unet  # the notebook's U-Net

from kagglekit.volumes.augment3d import Augment3d


def step_rates(model, optimizer, batch, rounds: int) -> tuple[float, float]:
    """Median patches/s of plain and augmented training steps, in alternating blocks of three so
    that both see the same machine load; each block's first step is not counted (a switch
    between inputs made by different ops costs the next step a warm-up of its own)."""
    images, labels = batch
    augment, rates = Augment3d(), {False: [], True: []}
    for block in range(2 * rounds):
        augmented = bool(block % 2)
        for i in range(3):
            started = time.perf_counter()
            x, y = augment(images, labels) if augmented else (images, labels)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), (y == 1).float())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if i:
                rates[augmented].append(len(images) / (time.perf_counter() - started))
    return statistics.median(rates[False]), statistics.median(rates[True])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    unet = notebook_unet()
    model = unet(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = (torch.rand(4, 1, *(args.patch,) * 3), torch.randint(0, 3, (4, 1, *(args.patch,) * 3)).float())
    plain, augmented = step_rates(model, optimizer, batch, args.rounds)
    print(f"U-Net 8x2 training step, batch 4 of {args.patch}^3 on this CPU: {plain:.1f} patches/s plain, "
          f"{augmented:.1f} augmented ({augmented / plain:.2f}x)")
    big = (torch.rand(4, 1, 96, 96, 96), torch.randint(0, 3, (4, 1, 96, 96, 96)).float())
    augment = Augment3d()
    started = time.perf_counter()
    for _ in range(5):
        augment(*big)
    per_batch = (time.perf_counter() - started) / 5
    t4_step = 4 * flops_per_patch(unet, 96, 16, 3) / T4_FP16_FLOPS  # a lower bound on a T4's step
    print(f"Kaggle's batch (4 of 96^3): augmentation {per_batch * 1e3:.0f} ms on this CPU; the U-Net 16x3 "
          f"step takes at least {t4_step * 1e3:.0f} ms on a T4 (patch_loader.py's FLOP bound)")


if __name__ == "__main__":
    main()
