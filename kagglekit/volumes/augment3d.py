"""Random 3-D augmentation of training patches, per batch on the patches' own device.

Every public Vesuvius notebook and the write-up's recipe train on flipped and rotated crops:
a surface is a surface whichever way the scroll lies in the scanner. Done on the GPU after the
batch arrives, so Kaggle's 4 vCPUs feed the loader exactly as without it
(benchmarks/augment3d.py measures patches/s with and without). Each sample draws its own:
- a flip along each of the three axes (probability 1/2 each);
- a 90-degree rotation, k in 0-3, in the axial (y, x) plane, or in a plane drawn from all
  three when ``all_planes`` (cubic patches only: a rotation in (z, y) swaps those edges);
- an intensity scale in [1 - scale, 1 + scale] and shift in [-shift, shift] (images only).
Labels get the same flips and rotations, never the intensity change. The draws come from
torch's global CPU generator, which the kit's checkpoints save and restore, so a resumed run
draws the very same augmentations.
"""
from __future__ import annotations

import torch

PLANES = ((3, 4), (2, 3), (2, 4))  # (y, x) axial first; dims of a (N, C, D, H, W) batch


class Augment3d:
    """``augment(images, labels) -> (images, labels)`` for (N, C, D, H, W) batches."""

    def __init__(self, flips: bool = True, rotations: bool = True, all_planes: bool = False,
                 scale: float = 0.1, shift: float = 0.1):
        if scale < 0 or shift < 0:
            raise ValueError(f"Augment3d(scale={scale}, shift={shift}): both must be >= 0 (0 turns one off)")
        self.flips, self.rotations, self.all_planes = flips, rotations, all_planes
        self.scale, self.shift = scale, shift

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if images.dim() != 5 or images.shape[0] != labels.shape[0]:
            raise ValueError(f"Augment3d takes (N, C, D, H, W) images and labels of the same N: got "
                             f"{tuple(images.shape)} and {tuple(labels.shape)}")
        n = images.shape[0]
        flips = torch.rand(n, 3) < 0.5 if self.flips else torch.zeros(n, 3, dtype=torch.bool)
        turns = torch.randint(0, 4, (n,)) if self.rotations else torch.zeros(n, dtype=torch.long)
        planes = torch.randint(0, 3 if self._cubic(images) else 1, (n,))
        gain = 1 + (torch.rand(n) * 2 - 1) * self.scale
        offset = (torch.rand(n) * 2 - 1) * self.shift
        out_x, out_y = [], []
        for i in range(n):
            x, y = images[i:i + 1], labels[i:i + 1]
            axes = [2 + a for a in range(3) if flips[i, a]]
            if axes:
                x, y = x.flip(axes), y.flip(axes)
            if turns[i]:
                plane = PLANES[int(planes[i])]
                x, y = x.rot90(int(turns[i]), plane), y.rot90(int(turns[i]), plane)
            out_x.append(x * gain[i].item() + offset[i].item())
            out_y.append(y)
        return torch.cat(out_x), torch.cat(out_y)

    def _cubic(self, images: torch.Tensor) -> bool:
        d, h, w = images.shape[2:]
        return self.all_planes and d == h == w
