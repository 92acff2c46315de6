"""An exponential moving average of the weights, kept beside the training: ``fit(..., ema=kk.Ema(0.999))``.

The average is torch's own (``torch.optim.swa_utils.AveragedModel`` with
``get_ema_multi_avg_fn``): a copy of the bare model (not DDP's wrapper; every rank keeps the same
one, as every rank holds the same weights), updated after each optimizer step, its buffers
(BatchNorm's statistics) averaged too. Its state travels in every checkpoint, so a killed fit
resumes it bitwise. With ``validate`` the epoch's validation scores the averaged weights (what is
submitted); after the fit ``ema.model`` is the averaged model, to predict with. The winning
write-ups of image competitions keep one at a decay of 0.999-0.9999.

With ``warmup`` (the default) update n keeps min(decay, (1 + n) / (10 + n)), as timm's ModelEmaV3
and TensorFlow's ExponentialMovingAverage do: a short fine-tune's average otherwise holds its
first, untrained steps (measured on the digits: a pretrained backbone's 44 steps at decay 0.95
averaged to 0.65 accuracy against the live weights' 0.81).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ..parallel import ranks


@dataclass(eq=False)
class Ema:
    """What the average is (``decay``: the weight kept per step), whether validation reads it,
    and, after a fit, the averaged model (``model``)."""
    decay: float = 0.999
    validate: bool = True
    warmup: bool = True
    model: torch.nn.Module | None = field(default=None, repr=False)  # set by fit: the averaged model

    def __post_init__(self):
        if not 0.0 < self.decay < 1.0:
            raise ValueError(f"Ema(decay={self.decay}): a weight kept per step, between 0 and 1 "
                             "(0.999 for a few thousand steps, 0.9999 for more)")


class Averaged:
    """The live average of one fit (``Parts.ema``)."""

    def __init__(self, model: torch.nn.Module, options: Ema):
        self.options = options
        self.updates = 0  # n_averaged as a number here: read per step without a device sync
        self.average = AveragedModel(ranks.unwrap(model), multi_avg_fn=self._update, use_buffers=True)
        options.model = self.average.module

    def _update(self, averaged, current, _n_averaged) -> None:
        decay = self.options.decay
        if self.options.warmup:
            decay = min(decay, (1 + self.updates) / (10 + self.updates))
        get_ema_multi_avg_fn(decay)(averaged, current, _n_averaged)

    def update(self, model: torch.nn.Module) -> None:
        self.average.update_parameters(ranks.unwrap(model))
        self.updates += 1

    def state_dict(self) -> dict:
        return self.average.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.average.load_state_dict(state)
        self.updates = int(self.average.n_averaged)

    @property
    def module(self) -> torch.nn.Module:
        return self.average.module
