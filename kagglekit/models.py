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


def _conv_block(cin: int, cout: int) -> nn.Sequential:
    groups = min(8, cout)
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(groups, cout), nn.GELU(),
        nn.Conv3d(cout, cout, 3, padding=1, bias=False), nn.GroupNorm(groups, cout), nn.GELU())


class UNet3D(nn.Module):
    """A compact 3-D U-Net: ``depth`` down/up levels, channels doubling per level.

    GroupNorm instead of BatchNorm: per-GPU batches of a few patches are too small
    for batch statistics, and nothing needs syncing across DDP ranks.
    """

    def __init__(self, channels: int = 1, width: int = 8, depth: int = 2, classes: int = 1):
        super().__init__()
        widths = [width * 2 ** i for i in range(depth + 1)]
        self.down = nn.ModuleList([_conv_block(channels, widths[0])] +
                                  [_conv_block(widths[i], widths[i + 1]) for i in range(depth)])
        self.up = nn.ModuleList([nn.ConvTranspose3d(widths[i + 1], widths[i], 2, stride=2)
                                 for i in reversed(range(depth))])
        self.merge = nn.ModuleList([_conv_block(2 * widths[i], widths[i])
                                    for i in reversed(range(depth))])
        self.head = nn.Conv3d(widths[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else nn.functional.max_pool3d(x, 2))
            skips.append(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips[:-1])):
            x = merge(torch.cat([up(x), skip], dim=1))
        return self.head(x)
