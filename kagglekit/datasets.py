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
