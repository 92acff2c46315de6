"""What ``fit`` checks before it trains and measures after each epoch: a loader that yields
nothing is refused, and validation runs through the user's ``evaluate`` or the mean loss."""
from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from ..parallel import loaders as data, ranks
from ..parallel.batches import batch_size
from .halving import HalvingForward


def refuse_empty(loader) -> None:
    """A loader that yields no batch would "train" zero steps and look like success."""
    try:
        batches = len(loader)
    except TypeError:
        return  # an iterable without a length: nothing to check up front
    if batches == 0:
        dataset, size = getattr(loader, "dataset", None), getattr(loader, "batch_size", "?")
        count = len(dataset) if dataset is not None and hasattr(dataset, "__len__") else "?"
        raise ValueError(f"the training loader yields no batch: {count} samples, batch_size={size}, "
                         f"drop_last={getattr(loader, 'drop_last', '?')} (per rank). Use a smaller "
                         "batch_size or drop_last=False (kk.make_loader never drops the only batch).")


def validation(parts, evaluate, val_loader, loss_fn, limit_batches,
               oom_backoff: bool = True) -> Callable[[], dict]:
    """The per-epoch validation: ``evaluate(model)``, else the mean loss over ``val_loader``;
    capped at ``limit_batches`` where the evaluator takes that keyword (``kk.evaluate``'s do).

    It runs on the bare model, not through DDP's wrapper: DDP's forward may start collectives
    (its buffer broadcast) that a rank with fewer validation batches never joins. With
    ``oom_backoff`` a forward out of memory runs again on its batch's halves (``halving``)."""
    capped = evaluate is not None and limit_batches is not None and \
        "limit_batches" in inspect.signature(evaluate).parameters

    def validate() -> dict:
        if evaluate is None and val_loader is None:
            return {}
        bare = ranks.unwrap(parts.model)
        if parts.ema is not None and parts.ema.options.validate:
            bare = parts.ema.module  # the averaged weights: what is submitted
        model = HalvingForward(bare) if oom_backoff else bare
        bare.eval()
        with torch.no_grad(), parts.amp.autocast():
            if evaluate is not None:
                metrics = evaluate(model, limit_batches=limit_batches) if capped \
                    else evaluate(model)
            else:
                metrics = evaluate_loss(model, val_loader, loss_fn, parts.device, limit_batches)
        parts.model.train()
        return {k: float(v) for k, v in metrics.items()}
    return validate


def evaluate_loss(model, loader, loss_fn, device, limit_batches=None) -> dict:
    """The mean loss over every sample of ``loader`` (of every rank under DDP): each batch's
    mean weighted by its samples (``batches.batch_size``, one definition for every batch kind)."""
    total = torch.zeros(2, dtype=torch.float64, device=device)
    for i, batch in enumerate(loader):
        if limit_batches is not None and i >= limit_batches:
            break
        batch = data.to_device(batch, device)
        size = batch_size(batch)
        total += torch.stack([loss_fn(model, batch).detach().double() * size,
                              torch.tensor(float(size), dtype=torch.float64, device=device)])
    if ranks.distributed():
        torch.distributed.all_reduce(total)
    return {"val_loss": (total[0] / total[1].clamp(min=1)).item()}


