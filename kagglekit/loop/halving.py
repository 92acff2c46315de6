"""A forward pass that survives running out of memory: its batch cut in halves.

Validation and prediction run without gradients and in eval mode, where each sample's output
depends on that sample only. So a forward that runs out of CUDA memory can run again on the two
halves of its batch, and the joined outputs are the whole batch's. This is the inference side
of the training step's back-off (``step``). Tensors are cut along their first dimension when
every tensor argument has the same number of rows. A call whose arguments do not share one
(a graph's ``x`` beside its ``edge_index``) cannot be cut, and its error is raised as it came.
"""
from __future__ import annotations

import gc

import torch

OOM_ERRORS = (torch.cuda.OutOfMemoryError,)


class HalvingForward(torch.nn.Module):
    """``module`` whose forward halves its batch on CUDA out-of-memory (``halvings`` counts)."""

    def __init__(self, module: torch.nn.Module, min_batch: int = 1):
        super().__init__()
        self.module, self.min_batch, self.halvings = module, min_batch, 0

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:  # the wrapped model's own attributes (config, encoder...)
            return getattr(self._modules["module"], name)

    def forward(self, *args, **kwargs):
        failed = None
        try:
            return self.module(*args, **kwargs)
        except OOM_ERRORS as err:
            failed = str(err).splitlines()[0] if str(err) else "CUDA out of memory"
        # Out of the except block: the failed forward's frames, and its activations, are gone.
        rows = shared_rows(args, kwargs)
        if rows is None or rows // 2 < self.min_batch:
            raise torch.cuda.OutOfMemoryError(
                f"{failed} (in a forward without gradients; its batch "
                + ("cannot be cut: its tensors differ in rows" if rows is None else f"of {rows} is at the floor")
                + "): use a smaller evaluation batch")
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        self.halvings += 1
        halves = [cut(args, kwargs, part) for part in (slice(0, rows // 2), slice(rows // 2, rows))]
        return join([self(*a, **k) for a, k in halves], [rows // 2, rows - rows // 2])


def _tensors(args, kwargs) -> list[torch.Tensor]:
    return [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor) and v.dim() > 0]


def shared_rows(args, kwargs) -> int | None:
    """The rows every tensor argument has (None: none, or they differ)."""
    sizes = {t.shape[0] for t in _tensors(args, kwargs)}
    return sizes.pop() if len(sizes) == 1 else None


def cut(args, kwargs, rows: slice) -> tuple[tuple, dict]:
    def take(v):
        return v[rows] if isinstance(v, torch.Tensor) and v.dim() > 0 else v
    return tuple(take(a) for a in args), {k: take(v) for k, v in kwargs.items()}


def join(outputs: list, rows: list[int]):
    """The halves' outputs as one: tensors with rows concatenated, a 0-dim tensor (a mean loss)
    averaged by rows, tuples, lists and dicts (transformers' outputs) item by item."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        if first.dim() == 0:
            return sum(o * r for o, r in zip(outputs, rows)) / sum(rows)
        return torch.cat(outputs)
    if isinstance(first, (tuple, list)):
        items = [join([o[i] for o in outputs], rows) for i in range(len(first))]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)
    if isinstance(first, dict):
        return type(first)(**{k: join([o[k] for o in outputs], rows) for k in first})
    return first  # None, or a value every half shares
