"""Random 2-D augmentation of training images, per batch on the images' own device.

Kaggle's 4 vCPUs decode JPEGs more slowly than a T4 trains on them; augmenting there too would
starve the card. So the loader only decodes, and the batch is augmented after it arrives, on the
GPU: one affine warp per sample (``grid_sample``: a flip, a rotation, a zoom and a shift together,
one resampling), a brightness and contrast change, then mixup or cutmix between samples of the
batch, which makes the targets soft (the loss takes class probabilities). Each sample draws its
own from torch's global CPU generator, which the kit's checkpoints save and restore, so a resumed
run draws the very same augmentations. Validation and prediction are never augmented (``tta``
averages the plain and flipped views instead).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F


@dataclass(frozen=True)
class Augment2d:
    """``augment(images, labels, classes) -> (images, soft targets)`` for (N, C, H, W) float images."""
    hflip: float = 0.5  # probability of a left-right flip
    vflip: float = 0.0  # of an upside-down one (aerial and microscope images: 0.5)
    degrees: float = 15.0  # rotations drawn from [-degrees, degrees]
    zoom: tuple[float, float] = (0.85, 1.15)  # a scale drawn from this range (> 1: zoomed in)
    shift: float = 0.1  # a translation, as a fraction of the side
    brightness: float = 0.2  # an added offset from [-b, b] (images standardised: in std units)
    contrast: float = 0.2  # a gain from [1 - c, 1 + c] around each image's mean
    mixup: float = 0.0  # Beta(a, a)'s a for mixup; 0: off
    cutmix: float = 0.0  # Beta(a, a)'s a for cutmix; 0: off (both on: half the batches each)

    def __post_init__(self):
        if not (0 <= self.hflip <= 1 and 0 <= self.vflip <= 1) or min(self.degrees, self.shift, self.brightness,
                                                                      self.contrast, self.mixup, self.cutmix) < 0:
            raise ValueError(f"{self}: probabilities in [0, 1], every other amount >= 0 (0 turns it off)")
        if not 0 < self.zoom[0] <= self.zoom[1]:
            raise ValueError(f"zoom={self.zoom}: a range (low, high) with 0 < low <= high")

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
        if images.dim() != 4 or images.shape[0] != labels.shape[0]:
            raise ValueError(f"Augment2d takes (N, C, H, W) images and N labels: got {tuple(images.shape)} "
                             f"and {tuple(labels.shape)}")
        targets = labels if labels.is_floating_point() else F.one_hot(labels.long(), classes).to(images.dtype)
        images = self.colour(self.warp(images))
        return self.mix(images, targets)

    def warp(self, images: torch.Tensor) -> torch.Tensor:
        n = images.shape[0]
        angle = (torch.rand(n) * 2 - 1) * math.radians(self.degrees)
        scale = self.zoom[0] + torch.rand(n) * (self.zoom[1] - self.zoom[0])
        flip_x = torch.where(torch.rand(n) < self.hflip, -1.0, 1.0)
        flip_y = torch.where(torch.rand(n) < self.vflip, -1.0, 1.0)
        move = (torch.rand(n, 2) * 2 - 1) * self.shift * 2  # grid units: the side is 2
        cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
        theta = torch.stack([torch.stack([cos * flip_x, -sin * flip_y, move[:, 0]], 1),
                             torch.stack([sin * flip_x, cos * flip_y, move[:, 1]], 1)], 1)
        grid = F.affine_grid(theta.to(images.device, images.dtype), list(images.shape), align_corners=False)
        return F.grid_sample(images, grid, mode="bilinear", padding_mode="reflection", align_corners=False)

    def colour(self, images: torch.Tensor) -> torch.Tensor:
        n = images.shape[0]
        gain = (1 + (torch.rand(n) * 2 - 1) * self.contrast).to(images.device, images.dtype).view(n, 1, 1, 1)
        offset = ((torch.rand(n) * 2 - 1) * self.brightness).to(images.device, images.dtype).view(n, 1, 1, 1)
        mean = images.mean(dim=(1, 2, 3), keepdim=True)
        return (images - mean) * gain + mean + offset

    def mix(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        use_cutmix = self.cutmix > 0 and (self.mixup == 0 or bool(torch.rand(()) < 0.5))
        alpha = self.cutmix if use_cutmix else self.mixup
        if alpha == 0 or images.shape[0] < 2:
            return images, targets
        share = float(torch.distributions.Beta(alpha, alpha).sample())
        pair = torch.randperm(images.shape[0]).to(images.device)
        if use_cutmix:  # a box of the partner's image pasted in; the targets mixed by its area
            h, w = images.shape[-2:]
            bh, bw = int(h * math.sqrt(1 - share)), int(w * math.sqrt(1 - share))
            top, left = int(torch.randint(0, h - bh + 1, ())), int(torch.randint(0, w - bw + 1, ()))
            images = images.clone()
            images[..., top:top + bh, left:left + bw] = images[pair][..., top:top + bh, left:left + bw]
            share = 1 - bh * bw / (h * w)
        else:
            images = share * images + (1 - share) * images[pair]
        return images, share * targets + (1 - share) * targets[pair]


@torch.no_grad()
def tta(model, images: torch.Tensor, views: tuple[str, ...] = ("plain", "hflip"), multilabel: bool = False
        ) -> torch.Tensor:
    """Test-time augmentation: the mean of the class probabilities over ``views`` of each image
    ("plain", "hflip", "vflip", "rot90": a quarter turn, "zoom": the central 90% enlarged back),
    the model in eval mode. ``multilabel``: each label's own probability (a sigmoid per logit)."""
    known = {"plain": lambda x: x, "hflip": lambda x: x.flip(-1), "vflip": lambda x: x.flip(-2),
             "rot90": lambda x: x.rot90(1, (-2, -1)), "zoom": _zoom}
    unknown = [v for v in views if v not in known]
    if unknown or not views:
        raise ValueError(f"views={views}: each of {', '.join(known)}")
    probabilities = torch.sigmoid if multilabel else lambda logits: torch.softmax(logits, -1)
    return torch.stack([probabilities(model(known[v](images)).float()) for v in views]).mean(0)


def _zoom(images: torch.Tensor, keep: float = 0.9) -> torch.Tensor:
    h, w = images.shape[-2:]
    dh, dw = int(round(h * (1 - keep) / 2)), int(round(w * (1 - keep) / 2))
    middle = images[..., dh:h - dh, dw:w - dw]
    return F.interpolate(middle, size=(h, w), mode="bilinear", align_corners=False)
