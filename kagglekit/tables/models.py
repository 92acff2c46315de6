"""Reference models the notebooks train."""
from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """A plain multi-layer perceptron: Linear -> GELU (-> Dropout) blocks, then a head."""

    def __init__(self, in_features: int, hidden: int, out_features: int, depth: int = 2,
                 dropout: float = 0.0):
        super().__init__()
        layers, width = [], in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))
