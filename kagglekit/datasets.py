"""Built-in data, generated deterministically from a seed (no downloads needed)."""
from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def tabular(n: int = 4096, features: int = 32, classes: int = 4, seed: int = 0,
            noise: float = 0.5) -> TensorDataset:
    """A classification task a small MLP can learn but a linear model cannot fully.

    Labels come from a random two-layer teacher network plus Gaussian noise.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w1 = torch.randn(features, 64, generator=g) / features ** 0.5
    w2 = torch.randn(64, classes, generator=g) / 8
    logits = torch.tanh(x @ w1 * 2) @ w2 * 4 + noise * torch.randn(n, classes, generator=g)
    return TensorDataset(x, logits.argmax(dim=1))


def split(dataset, fractions=(0.8, 0.2), seed: int = 0):
    """Deterministic random split by fractions."""
    g = torch.Generator().manual_seed(seed)
    return torch.utils.data.random_split(dataset, list(fractions), generator=g)


def temporal(n: int = 4096, length: int = 64, features: int = 8, classes: int = 4,
             seed: int = 0) -> TensorDataset:
    """Multivariate sequences whose class is a temporal pattern, not a per-step value.

    Each sequence mixes noise with a sine burst; the class is set by the burst's
    frequency and by which channel leads the other (a lag), so a model must look
    across time steps. Shapes: x (n, length, features), y (n,).
    """
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    t = torch.arange(length, dtype=torch.float32)
    freq = 0.15 + 0.1 * (y % 2).float()  # class bit 0: frequency
    lag = torch.where(y // 2 == 1, 3, -3)  # class bit 1: which channel leads
    phase = 2 * torch.pi * torch.rand(n, generator=g)
    start = torch.randint(0, length // 2, (n,), generator=g)
    window = ((t[None] >= start[:, None]) & (t[None] < start[:, None] + length // 2)).float()
    lead = torch.sin(freq[:, None] * 2 * torch.pi * t[None] + phase[:, None]) * window
    follow = torch.stack([row.roll(int(s)) for row, s in zip(lead, lag)])
    x = 0.5 * torch.randn(n, length, features, generator=g)
    x[:, :, 0] += lead
    x[:, :, 1] += follow
    return TensorDataset(x, y)


def volumes(n: int = 6, size: int = 32, seed: int = 0, sheets: int = 2,
            noise: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy 3-D volumes holding thin curved sheets of "ink" (the labels).

    Sheet voxels are only slightly brighter than the noise and bright blobs that are
    *not* ink are scattered around, so thresholding fails: finding the sheets needs
    their 3-D shape. Returns (volumes (n, 1, s, s, s) float32, masks (n, 1, s, s, s) uint8).
    """
    g = torch.Generator().manual_seed(seed)
    axis = torch.linspace(0, 1, size)
    zz, yy, xx = torch.meshgrid(axis, axis, axis, indexing="ij")
    vols, masks = [], []
    for _ in range(n):
        mask = torch.zeros(size, size, size, dtype=torch.bool)
        for _ in range(sheets):
            a, b, c, d, off = torch.rand(5, generator=g)
            surface = off * 0.6 + 0.2 + 0.08 * torch.sin(6 * a * xx + 3 * b) + \
                0.08 * torch.cos(5 * c * yy + 2 * d)
            mask |= (zz - surface).abs() < 0.6 / size
        vol = noise * torch.randn(size, size, size, generator=g) + 1.2 * mask.float()
        for _ in range(4):  # distractors: bright blobs, not ink
            cz, cy, cx = torch.rand(3, generator=g)
            blob = ((zz - cz) ** 2 + (yy - cy) ** 2 + (xx - cx) ** 2) < 0.07 ** 2
            vol += 2.0 * blob.float()
        vols.append(vol[None])
        masks.append(mask[None].to(torch.uint8))
    return torch.stack(vols), torch.stack(masks)


def load_volumes(folder) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Real volumes from ``<id>_volume.npy`` + ``<id>_mask.npy`` pairs (numpy, no pickle)."""
    import numpy as np
    from pathlib import Path
    folder = Path(folder)
    ids = sorted(p.name[: -len("_volume.npy")] for p in folder.rglob("*_volume.npy"))
    if not ids:
        raise FileNotFoundError(f"{folder} holds no <id>_volume.npy files")
    vols, masks = [], []
    for i in ids:
        vol_path = next(folder.rglob(f"{i}_volume.npy"))
        mask_path = vol_path.with_name(f"{i}_mask.npy")
        if not mask_path.exists():
            raise FileNotFoundError(f"{vol_path} has no matching {mask_path.name}")
        vols.append(torch.from_numpy(np.load(vol_path, allow_pickle=False)).float()[None])
        masks.append(torch.from_numpy(np.load(mask_path, allow_pickle=False)).to(torch.uint8)[None])
    return torch.stack(vols), torch.stack(masks), ids


def load_sequences(folder) -> TensorDataset:
    """Real sequences from ``sequences.npz`` (arrays ``x``: N x T x F, ``y``: N), no pickle."""
    import numpy as np
    from pathlib import Path
    path = next(Path(folder).rglob("sequences.npz"))
    with np.load(path, allow_pickle=False) as npz:
        missing = {"x", "y"} - set(npz.files)
        if missing:
            raise KeyError(f"{path} lacks arrays {sorted(missing)} (needs x: N x T x F, y: N)")
        return TensorDataset(torch.from_numpy(npz["x"]).float(), torch.from_numpy(npz["y"]).long())
