"""3-D segmentation parts: patches of lazy volumes, their validation (Dice with an ignore label,
the leaderboard's score), the threshold baseline, sliding-window inference with test-time flips
and turns, and the submission zip."""
from __future__ import annotations

import io
import itertools
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..parallel.loaders import to_device
from ..score.evaluate import all_sum
from ..state import atomic
from .folder import IGNORE
from .surfacescore import vesuvius_score


class Patches(Dataset):
    """Random cubic patches of (image, label) volumes read lazily, deterministic per index.

    Patch ``i`` depends only on (seed, i), so a resumed epoch sees the very same
    patches. Volumes may differ in shape; only the patch is read (a memory map or the
    crop's pages), never a whole volume. A ``foreground`` share of patches is centred on
    a surface voxel (label 1): surfaces are thin, and uniform crops would be nearly all
    background. Images come as float32 in [0, 1], labels as float with 2 (ignore) kept.
    """

    def __init__(self, images: list, labels: list, patch: int, length: int, seed: int = 0,
                 foreground: float = 0.5, max_centres: int = 20_000):
        small = [v.shape for v in images if min(v.shape) < patch]
        if small:
            raise ValueError(f"patch={patch} is larger than volumes of shape {small[0]}; lower patch")
        self.images, self.labels, self.patch = images, labels, patch
        self.length, self.seed, self.foreground = length, seed, foreground
        self.centres = [_surface_voxels(v, max_centres, seed) for v in labels]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        g = np.random.default_rng(self.seed * 1_000_003 + i)
        v = int(g.integers(len(self.images)))
        shape, p = np.array(self.images[v].shape), self.patch
        if g.random() < self.foreground and len(self.centres[v]):
            corner = np.maximum(self.centres[v][g.integers(len(self.centres[v]))] - p // 2, 0)
        else:
            corner = (g.random(3) * (shape - p + 1)).astype(int)
        corner = np.minimum(corner, shape - p)
        image = self.images[v].crop(corner, p).astype(np.float32) / 255.0
        label = self.labels[v].crop(corner, p).astype(np.float32)
        return torch.from_numpy(image)[None], torch.from_numpy(label)[None]


def _surface_voxels(label, limit: int, seed: int, slab: int = 4) -> np.ndarray:
    """Up to ``limit`` coordinates of label-1 voxels, read ``slab`` z-slices at a time and
    sampled as they come (a surface may hold millions of voxels: never all of them at once)."""
    rng = np.random.default_rng(seed)
    depth, found = label.shape[0], []
    for z in range(0, depth, slab):
        part = label.crop((z, 0, 0), (min(slab, depth - z), *label.shape[1:]))
        index = np.flatnonzero(part == 1)
        if len(index) > limit:
            index = rng.choice(index, limit, replace=False)
        coords = np.stack(np.unravel_index(index, part.shape), axis=1).astype(np.int32)
        coords[:, 0] += z
        found.append(coords)
    coords = np.concatenate(found) if found else np.zeros((0, 3), np.int32)
    return coords[rng.choice(len(coords), limit, replace=False)] if len(coords) > limit else coords


def dice(pred, truth, ignore: int | None = IGNORE) -> float:
    """Dice of the surface (truth == 1) over the voxels whose truth is not ``ignore``
    (1.0 when both are empty there).

    Equal to scikit-learn's binary F1 on the kept voxels (tests/test_metrics.py checks
    it), counted in torch on the tensors' own device.
    """
    pred, truth = torch.as_tensor(pred), torch.as_tensor(truth)
    keep = truth != ignore if ignore is not None else torch.ones_like(truth, dtype=torch.bool)
    pred, surface = pred.bool() & keep, truth == 1
    total = pred.sum() + surface.sum()
    return 1.0 if total == 0 else float(2 * (pred & surface).sum() / total)


def evaluator(loader, device, loss_fn, ignore: int = IGNORE, scored: int = 64):
    """``evaluate(model) -> {"val_loss", "val_dice", "val_score"}`` over patches (all ranks
    together); labels equal to ``ignore`` count in neither. ``val_score``: the Vesuvius
    leaderboard score (``surfacescore``, what the competition ranks) averaged over the first
    ``scored`` patches of each rank, counted on the CPU (about 0.12 s for a 96^3 patch: all of
    Kaggle's 512 validation patches would add a minute per epoch); 0 leaves it out."""
    def evaluate(model, limit_batches: int | None = None) -> dict:
        total = torch.zeros(4, dtype=torch.float64, device=device)  # loss, inter, sizes, n
        points = torch.zeros(2, dtype=torch.float64)  # score sum, patches scored
        for batch in itertools.islice(loader, limit_batches):
            x, y = to_device(batch, device)
            logits = model(x)
            keep = (y != ignore).float()
            pred, surface = (logits > 0).float() * keep, (y == 1).float()
            total += torch.stack([loss_fn(logits, y).double() * len(y),
                                  (pred * surface).sum().double(), (pred.sum() + surface.sum()).double(),
                                  torch.tensor(float(len(y)), dtype=torch.float64, device=device)])
            take = int(min(len(y), scored - points[1].item()))
            if take > 0:
                points += torch.tensor([sum(vesuvius_score(p[0], t[0])["score"] for p, t in zip(
                    (logits[:take] > 0).cpu().numpy(), y[:take].cpu().numpy())), take])
        total, points = all_sum(total), all_sum(points.to(device))
        found = {"val_loss": (total[0] / total[3]).item(), "val_dice": (2 * total[1] / total[2].clamp(min=1)).item()}
        return {**found, "val_score": (points[0] / points[1]).item()} if scored > 0 else found
    return evaluate


def threshold_counts(image: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Per intensity 0..255: (surface voxels, other labelled voxels) -- summed over
    volumes they give the Dice of every threshold at once."""
    counts = np.zeros((256, 2), dtype=np.int64)
    for cls, column in ((1, 0), (0, 1)):
        counts[:, column] = np.bincount(image[label == cls].ravel(), minlength=256)[:256]
    return counts


def best_threshold(counts: np.ndarray) -> tuple[int, float]:
    """The intensity-threshold baseline: (t, Dice) of calling ``image >= t`` surface."""
    above = counts[::-1].cumsum(0)[::-1]  # voxels at or above each threshold
    tp, fp, positives = above[:, 0], above[:, 1], counts[:, 0].sum()
    scores = 2 * tp / np.maximum(2 * tp + fp + (positives - tp), 1)
    t = int(scores.argmax())
    return t, float(scores[t])


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
                   batch: int = 8, autocast=None, flips: int = 0, rotations: int = 0) -> torch.Tensor:
    """Surface probabilities for a whole (C, D, H, W) volume from overlapping windows.

    Windows overlap by ``overlap``; their logits are blended with a Gaussian map so
    window seams do not show. Test-time augmentation: ``flips`` (0-3) the windows also
    flipped along z, then y, then x; ``rotations`` (0-3) also turned by 90, 180, 270 degrees
    in the axial (y, x) plane; each view's logits turned back and all averaged.
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
    views = _views(flips, rotations)
    for i in range(0, len(corners), batch):
        group = corners[i:i + batch]
        x = torch.stack([volume[:, z:z + patch, y:y + patch, x_:x_ + patch]
                         for z, y, x_ in group]).to(device, non_blocking=True)
        with autocast or torch.autocast(device.type, enabled=False):
            logits = sum(back(model(there(x)))[:, 0].float() for there, back in views) / len(views)
        for (z, y, x_), out in zip(group, logits):
            acc[z:z + patch, y:y + patch, x_:x_ + patch] += out * weight
            norm[z:z + patch, y:y + patch, x_:x_ + patch] += weight
    return torch.sigmoid(acc / norm).cpu()


def _views(flips: int, rotations: int) -> list:
    """(to the view, back) pairs for (N, C, D, H, W) windows: the plain one, then the flips,
    then the axial rotations."""
    if not (0 <= flips <= 3 and 0 <= rotations <= 3):
        raise ValueError(f"flips={flips}, rotations={rotations}: each counts views from 0 to 3")
    views: list[tuple[Callable, Callable]] = [(lambda t: t, lambda t: t)]
    views += [(lambda t, a=a: t.flip(a), lambda t, a=a: t.flip(a)) for a in (2, 3, 4)[:flips]]
    views += [(lambda t, k=k: t.rot90(k, (3, 4)), lambda t, k=k: t.rot90(-k, (3, 4)))
              for k in range(1, rotations + 1)]
    return views


def write_submission(path: Path | str, masks: dict[str, Path]) -> Path:
    """``submission.zip``: one plain (uncompressed) uint8 ``<id>.tif`` per test volume, the
    zip deflating them, written atomically. The mask files may be zlib-compressed TIFFs
    (a 320^3 mask is 33 MB raw, a few hundred KB compressed: /kaggle/working holds 20 GB)."""
    import tifffile
    path = Path(path)
    with atomic.atomic_path(path) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for vid, file in masks.items():
                buf = io.BytesIO()
                tifffile.imwrite(buf, tifffile.imread(file), photometric="minisblack")
                zf.writestr(f"{vid}.tif", buf.getvalue())
    return path


class SubmissionError(ValueError):
    """submission.zip does not hold what the competition expects."""


def check_submission(path: Path | str, expected: dict[str, tuple | None]) -> int:
    """Every test id present once as ``<id>.tif``: a 3-D uint8 mask of 0 / 1 with its
    source's shape (when the shape is given), nothing else. Returns the number of masks; raises SubmissionError listing
    every problem."""
    import tifffile
    problems = []
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        missing = sorted(set(f"{v}.tif" for v in expected) - set(names))
        extra = sorted(set(names) - set(f"{v}.tif" for v in expected))
        problems += [f"no mask for test id {n[:-4]}" for n in missing]
        problems += [f"{n} is not a test id" for n in extra]
        for vid, shape in expected.items():
            if f"{vid}.tif" not in names:
                continue
            mask = tifffile.imread(io.BytesIO(zf.read(f"{vid}.tif")))
            if mask.dtype != np.uint8 or mask.ndim != 3 or (shape is not None and mask.shape != tuple(shape)):
                want = f"uint8 {tuple(shape)}" if shape is not None else "a uint8 volume"
                problems.append(f"{vid}.tif is {mask.dtype} {mask.shape}, must be {want}")
            elif mask.max(initial=0) > 1:
                problems.append(f"{vid}.tif holds values above 1")
    if problems:
        raise SubmissionError(f"{path}: " + "; ".join(problems[:10]))
    return len(expected)


def slice_figure(images, truths, preds, names, title: str = "slices with the most surface"):
    """Input, truth (grey: unlabelled) and prediction side by side, for each volume the
    z-slice with the most surface voxels."""
    from ..run.plots import pyplot
    plt = pyplot()
    fig, axes = plt.subplots(len(names), 3, figsize=(8, 2.6 * len(names)), squeeze=False)
    for row, (image, truth, pred, name) in enumerate(zip(images, truths, preds, names)):
        z = int((truth == 1).reshape(len(truth), -1).sum(1).argmax())
        for ax, img, label in zip(axes[row], (image[z], truth[z], pred[z]),
                                  ("input", "truth", "prediction")):
            ax.imshow(img, cmap="gray" if label == "input" else "magma", vmin=0,
                      vmax=255 if label == "input" else 2)
            ax.set_title(f"{name}: {label}", fontsize=9)
            ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
