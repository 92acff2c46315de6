"""The largest per-GPU batch of the segmentation U-Net at its Kaggle patch that a T4's 15 GiB hold
(``KAGGLEKIT_AS=t4`` caps this card's memory there), fp16 with its scaler, by running the step
(``kagglekit.loop.batchsize``): what the notebook's Kaggle ``batch_size`` should be, measured."""
from __future__ import annotations

import os

from common import REPO, card, main

os.environ["KAGGLEKIT_AS"] = "t4"


def check():
    import torch

    import kagglekit as kk
    from kagglekit.tools import borrow
    seg = kk.figures.pipeline(borrow.pipeline("segmentation_3d", REPO / "notebooks", REPO / "kernel-metadata"))
    device = card()
    kk.ascard.confine(device)  # the T4's 15 GiB
    model = seg.UNet3D(seg.width, seg.depth).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp = kk.precision.Amp(kk.precision.resolve("auto", device))

    def step(batch: int):
        x = torch.rand(batch, 1, seg.patch, seg.patch, seg.patch, device=device)
        y = torch.randint(0, 3, x.shape, device=device).to(torch.uint8)
        with amp.autocast():
            loss = seg.surface_loss(model(x), y)
        amp.scaler.scale(loss).backward()
        amp.scaler.step(optimizer)
        amp.scaler.update()
        optimizer.zero_grad(set_to_none=True)
    found = kk.batchsize.largest_batch(step, start=2, limit=256, device=device)
    # what the emulation counts on fake tensors for the same step, beside the card's own peak
    counted = kk.batchplan.counted_step_bytes(
        lambda: seg.UNet3D(seg.width, seg.depth), lambda b: (torch.rand(b, 1, seg.patch, seg.patch, seg.patch),),
        lambda m, batch: m(batch[0]).float().mean(), found["largest_fit"], half=amp.name != "fp32")
    facts = {"patch": seg.patch, "width": seg.width, "depth": seg.depth, "precision": amp.name,
             "kaggle_batch_size": seg.batch_size, **{k: found[k] for k in ("batch", "largest_fit", "peak_mb")},
             "counted_mb_at_largest_fit": round(counted / 2**20, 1)}
    return found["largest_fit"] >= 1, facts


if __name__ == "__main__":
    main(check)
