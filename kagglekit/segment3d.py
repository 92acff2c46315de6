"""3-D segmentation parts: patch sampling, Dice, sliding-window inference, submission."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import Dataset

from . import atomic


class Patches(Dataset):
    """Random cubic patches of (volume, mask) pairs, deterministic per index.

    Patch ``i`` depends only on (seed, i), so a resumed epoch sees the very same
    patches. Half of the patches are centred on a foreground voxel: sheets are
    thin, and uniform crops would be nearly all background.
    """

    def __init__(self, volumes: torch.Tensor, masks: torch.Tensor, patch: int, length: int,
                 seed: int = 0, foreground: float = 0.5):
        self.volumes, self.masks, self.patch = volumes, masks, patch
        self.length, self.seed, self.foreground = length, seed, foreground
        self.fg = [m[0].nonzero() for m in masks]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        v = int(torch.randint(len(self.volumes), (1,), generator=g))
        shape = torch.tensor(self.volumes.shape[2:])
        p = self.patch
        if torch.rand(1, generator=g).item() < self.foreground and len(self.fg[v]):
            centre = self.fg[v][int(torch.randint(len(self.fg[v]), (1,), generator=g))]
            corner = (centre - p // 2).clamp(min=0)
        else:
            corner = (torch.rand(3, generator=g) * (shape - p + 1)).long()
        corner = torch.minimum(corner, shape - p)
        z, y, x = corner.tolist()
        crop = (slice(None), slice(z, z + p), slice(y, y + p), slice(x, x + p))
        return self.volumes[v][crop], self.masks[v][crop].float()


def dice_bce_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """BCE for every voxel plus soft Dice for the thin foreground."""
    bce = F.binary_cross_entropy_with_logits(logits.float(), target)
    prob = torch.sigmoid(logits.float())
    inter = (prob * target).sum()
    soft_dice = (2 * inter + 1) / (prob.sum() + target.sum() + 1)
    return bce + (1 - soft_dice)


def dice(pred: torch.Tensor, truth: torch.Tensor) -> float:
    """Dice of two binary masks (1.0 when both are empty).

    Equal to scikit-learn's binary F1 (tests/test_metrics.py checks it) but counted in
    torch, on the tensors' own device, without copying a whole volume to the host.
    """
    pred, truth = pred.bool(), truth.bool()
    total = pred.sum() + truth.sum()
    return 1.0 if total == 0 else float(2 * (pred & truth).sum() / total)


def _blend_weights(patch: int, device) -> torch.Tensor:
    """A Gaussian importance map: window centres count more than their edges."""
    axis = torch.linspace(-1, 1, patch, device=device)
    g = torch.exp(-(axis ** 2) / (2 * 0.5 ** 2))
    return (g[:, None, None] * g[None, :, None] * g[None, None, :]).clamp(min=1e-3)


def _starts(size: int, patch: int, stride: int) -> list[int]:
    starts = list(range(0, max(size - patch, 0) + 1, stride))
    if starts[-1] != size - patch:
        starts.append(size - patch)  # the last window touches the far edge
    return starts


@torch.no_grad()
def sliding_window(model, volume: torch.Tensor, patch: int, overlap: float = 0.5,
                   batch: int = 8, autocast=None) -> torch.Tensor:
    """Probabilities for a whole (C, D, H, W) volume from overlapping windows.

    Windows overlap by ``overlap``; their logits are blended with a Gaussian map so
    window seams do not show in the prediction.
    """
    device = next(model.parameters()).device
    model.eval()
    _, d, h, w = volume.shape
    stride = max(1, int(patch * (1 - overlap)))
    corners = [(z, y, x) for z in _starts(d, patch, stride) for y in _starts(h, patch, stride)
               for x in _starts(w, patch, stride)]
    weight = _blend_weights(patch, device)
    acc = torch.zeros(d, h, w, device=device)
    norm = torch.zeros(d, h, w, device=device)
    for i in range(0, len(corners), batch):
        group = corners[i:i + batch]
        x = torch.stack([volume[:, z:z + patch, y:y + patch, x_:x_ + patch]
                         for z, y, x_ in group]).to(device, non_blocking=True)
        with autocast or torch.autocast(device.type, enabled=False):
            logits = model(x)[:, 0].float()
        for (z, y, x_), out in zip(group, logits):
            acc[z:z + patch, y:y + patch, x_:x_ + patch] += out * weight
            norm[z:z + patch, y:y + patch, x_:x_ + patch] += weight
    return torch.sigmoid(acc / norm).cpu()


def best_threshold_dice(volumes: torch.Tensor, masks: torch.Tensor) -> tuple[float, float]:
    """The intensity-threshold baseline: (best threshold, its Dice) on these volumes."""
    best = (0.0, -1.0)
    for t in torch.linspace(float(volumes.mean()), float(volumes.max()), 25).tolist():
        score = dice(volumes > t, masks)
        best = max(best, (t, score), key=lambda b: b[1])
    return best


def write_submission(path: Path | str, masks: dict[str, torch.Tensor]) -> Path:
    """A zip with one ``<id>.npy`` (uint8) per volume, written atomically."""
    path = Path(path)
    with atomic.atomic_path(path) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name, mask in masks.items():
                buf = io.BytesIO()
                np.save(buf, mask.to(torch.uint8).numpy(), allow_pickle=False)
                zf.writestr(f"{name}.npy", buf.getvalue())
    return path


def slice_figure(volumes, truths, preds, names, title: str = "slices with the most ink"):
    """Input, truth and prediction side by side, for each volume the z-slice with the
    most labelled voxels (a slice without any would show nothing to compare)."""
    from .plots import _pyplot
    plt = _pyplot()
    fig, axes = plt.subplots(len(names), 3, figsize=(8, 2.6 * len(names)), squeeze=False)
    for row, (vol, truth, pred, name) in enumerate(zip(volumes, truths, preds, names)):
        z = int((truth[0] == 1).flatten(1).sum(1).argmax())
        for ax, img, label in zip(axes[row], (vol[0, z], truth[0, z], pred[z]),
                                  ("input", "truth", "prediction")):
            ax.imshow(img, cmap="gray" if label == "input" else "magma")
            ax.set_title(f"{name}: {label}", fontsize=9)
            ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
