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
             seed: int = 0, noise: float = 0.3) -> TensorDataset:
    """Sequences whose class is the *order* of two events far apart in time.

    Every step carries one of ``features`` symbols, one-hot, plus Gaussian noise. Two
    steps at random positions hold the events, each symbol A or B (the first two
    channels); every other step a random distractor symbol. The class is (first event
    is A, second event is A) as two bits: with 4 classes, AA and BB can be told by
    counting, but AB against BA only by order (the temporal order problem of
    Hochreiter & Schmidhuber, 1997). A model that reads in order (LSTM) or compares
    positions (Transformer) solves it; an MLP on the flattened sequence has to learn
    every pair of positions and does not. ``classes=2``: always one A and one B.
    Shapes: x (n, length, features), y (n,).
    """
    if classes not in (2, 4) or features < 3:
        raise ValueError(f"temporal() makes 2 or 4 classes from >= 3 symbols, not classes={classes}, "
                         f"features={features}")
    g = torch.Generator().manual_seed(seed)
    symbols = torch.randint(2, features, (n, length), generator=g)  # distractors
    first = torch.randint(0, length - 1, (n,), generator=g)
    second = first + 1 + (torch.rand(n, generator=g) * (length - 1 - first)).long()
    is_a = torch.randint(0, 2, (n, 2), generator=g)
    if classes == 2:
        is_a[:, 1] = 1 - is_a[:, 0]
    rows = torch.arange(n)
    symbols[rows, first] = 1 - is_a[:, 0]  # symbol 0 is A, 1 is B
    symbols[rows, second] = 1 - is_a[:, 1]
    x = torch.nn.functional.one_hot(symbols, features).float()
    x += noise * torch.randn(x.shape, generator=g)
    y = is_a[:, 0] if classes == 2 else 2 * is_a[:, 0] + is_a[:, 1]
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


def load_sequences(folder) -> TensorDataset:
    """Real sequences from ``sequences.npz`` (arrays ``x``: N x T x F, ``y``: N), no pickle."""
    from pathlib import Path

    import numpy as np
    path = next(Path(folder).rglob("sequences.npz"))
    with np.load(path, allow_pickle=False) as npz:
        missing = {"x", "y"} - set(npz.files)
        if missing:
            raise KeyError(f"{path} lacks arrays {sorted(missing)} (needs x: N x T x F, y: N)")
        return TensorDataset(torch.from_numpy(npz["x"]).float(), torch.from_numpy(npz["y"]).long())


def series(length: int = 4000, channels: int = 4, seed: int = 0, period: int = 24) -> torch.Tensor:
    """Multivariate series (length x channels) with trend, two seasonalities and regimes.

    Channel 0 is the target: a trend, a daily (``period``) and a weekly cycle, level
    and volatility regime changes at random times, and a lagged echo of channel 1
    (a leading indicator), so that past exogenous values help the forecast.
    """
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(length, dtype=torch.float32)
    out = torch.zeros(length, channels)
    for c in range(channels):
        level = torch.zeros(length)
        vol = torch.ones(length)
        for cut in torch.randint(length // 10, length, (4,), generator=g).tolist():
            level[cut:] += 1.5 * torch.randn(1, generator=g)
            vol[cut:] *= float(torch.empty(1).uniform_(0.6, 1.6, generator=g))
        phase = 2 * torch.pi * torch.rand(2, generator=g)
        out[:, c] = (0.0015 * (c + 1) * t + 2.0 * torch.sin(2 * torch.pi * t / period + phase[0])
                     + 1.0 * torch.sin(2 * torch.pi * t / (7 * period) + phase[1]) + level
                     + 0.3 * vol * torch.randn(length, generator=g))
    if channels > 1:
        out[6:, 0] += 0.8 * out[:-6, 1] - 0.8 * out[:-6, 1].mean()  # channel 1 leads by 6 steps
    return out
