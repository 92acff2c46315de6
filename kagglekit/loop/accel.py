"""Speed switches for a model: torch.compile with a fallback, gradient checkpointing.

CUDA-graph replay lives in ``cudagraph``."""
from __future__ import annotations

import functools
import sys

import torch
from torch.utils.checkpoint import checkpoint

COMPILE_MODES = ("off", "auto", "strict")


class Compiled:
    """Runs a model compiled, and falls back to eager if compilation fails.

    torch.compile is lazy: errors surface at the first call, inside the training
    step. ``run`` catches the first failure of the compiled model (in "auto"
    mode), prints one line with the reason, and from then on runs eagerly.
    """

    def __init__(self, model: torch.nn.Module, mode="off", options: dict | None = None):
        options = dict(options or {})
        if isinstance(mode, dict):
            mode, options = "auto", {**options, **mode}
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile={mode!r} must be one of {COMPILE_MODES} or a dict of "
                             "torch.compile options")
        self.eager = model
        self.mode = mode
        self.model = torch.compile(model, **options) if mode != "off" else model
        self.proven = mode == "off"  # has the compiled model run a step yet?
        self.status = "eager" if mode == "off" else "compiled"

    def run(self, step_fn, *args):
        """Run ``step_fn(model, *args)``; on the first compiled failure retry it eagerly."""
        if self.proven:
            return step_fn(self.model, *args)
        try:
            out = step_fn(self.model, *args)
        except Exception as err:  # noqa: BLE001 - any backend failure means "use eager"
            if self.mode == "strict":
                raise
            reason = failure_reason(err)
            print(f"kagglekit: torch.compile failed, training eagerly instead ({reason[:200]})",
                  file=sys.stderr)
            self.model, self.status = self.eager, f"eager (compile failed: {reason[:200]})"
            for p in self.eager.parameters():
                p.grad = None
            out = step_fn(self.model, *args)
        self.proven = True
        return out


def failure_reason(err: BaseException) -> str:
    """One line: the outer error's type and the root cause's message."""
    root: BaseException = err
    while getattr(root, "inner_exception", None) or root.__cause__:
        root = getattr(root, "inner_exception", None) or root.__cause__  # type: ignore[assignment]  # the loop's test
    lines = str(root).strip().splitlines()
    return f"{type(err).__name__}: {type(root).__name__}: {lines[0] if lines else ''}"


def checkpoint_blocks(blocks: torch.nn.ModuleList | list[torch.nn.Module]) -> None:
    """Recompute each block's activations in the backward pass instead of storing them.

    Trades about one extra forward pass for memory: activations of a block are kept
    only at its boundary. Only active in training mode.
    """
    for block in blocks:
        if getattr(block, "_kagglekit_checkpointed", False):
            continue
        forward = block.forward

        @functools.wraps(forward)
        def wrapped(*args, _forward=forward, _block=block, **kwargs):
            if _block.training and torch.is_grad_enabled():
                return checkpoint(_forward, *args, use_reentrant=False, **kwargs)
            return _forward(*args, **kwargs)

        block.forward = wrapped
        block._kagglekit_checkpointed = True  # type: ignore[assignment]  # a mark on the module

