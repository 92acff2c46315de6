"""CUDA-graph replay: a forward or a backward pass launched with one call.

A training step of a small model is hundreds of tiny kernels; the CPU launching
them one by one leaves the GPU idle between them (monitor's "launch-bound"
verdict). A captured CUDA graph replays all of them with a single launch.

- ``GraphedFunction``: a pure tensor function on static buffers (inference, the
  utilisation study's GPU step).
- ``GraphedModel``: a model's training forward and backward, captured with
  ``torch.cuda.make_graphed_callables`` at the first step and replayed while the
  inputs keep their shapes; ``fit(cuda_graphs="auto")`` installs it. Calls it
  cannot replay (another shape, a second call in one pass, keyword arguments) run
  eagerly, and ``status`` says how many and why. The optimizer step stays eager:
  GradScaler's inf check reads the GPU from the host and schedulers change the
  learning rate as a Python number, neither of which a graph can hold, and a
  foreach optimizer step is only a few kernels.
"""
from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable

import torch

from .accel import failure_reason

MODES = ("off", "auto", "strict")
# Module-level so tests can run the guard logic on CPU with a stand-in capture.
make_graphed_callables = getattr(torch.cuda, "make_graphed_callables", None)
REQUIRE_CUDA = True


class GraphedFunction:
    """``fn`` on static input buffers, captured once as a CUDA graph and replayed.

    Inputs must keep their shapes; they are copied into the static buffers each
    call. When capture is impossible (no CUDA, host syncs inside ``fn``) ``status``
    says why and calls run ``fn`` eagerly.
    """

    def __init__(self, fn, example_inputs: tuple, warmup: int = 3):
        self.fn, self.graph, self.status = fn, None, "eager"
        if not torch.cuda.is_available() or not all(t.is_cuda for t in example_inputs):
            self.status = "eager (CUDA graphs need CUDA tensors)"
            return
        try:
            self.static_in = tuple(t.clone() for t in example_inputs)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the default stream, as capture needs
                for _ in range(warmup):
                    fn(*self.static_in)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = fn(*self.static_in)
            self.status = "cuda graph"
        except Exception as err:  # noqa: BLE001 - not capturable: say why, run eagerly
            self.graph, self.status = None, f"eager (capture failed: {failure_reason(err)})"

    def __call__(self, *inputs):
        if self.graph is None:
            return self.fn(*inputs)
        for buf, value in zip(self.static_in, inputs):
            buf.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.static_out


def _signature(args: tuple) -> tuple:
    return tuple((tuple(a.shape), a.dtype, a.device, a.requires_grad) for a in args)


def _shapes(signature: tuple) -> str:
    return ", ".join(str(tuple(s[0])) for s in signature)


class GraphedModel:
    """Replays ``module``'s training forward and backward as CUDA graphs.

    ``install()`` makes it the module's ``forward``; ``remove()`` puts the eager one back.
    Evaluation calls (eval mode or no grad) always run eagerly and are not counted.
    The training loop calls ``begin_pass(first)`` before each micro-batch's loss.
    """

    def __init__(self, module: torch.nn.Module, mode: str = "auto", *, warmup: int = 3,
                 inactive: str | None = None):
        if mode not in MODES:
            raise ValueError(f"cuda_graphs={mode!r} must be one of {MODES}")
        self.module, self.mode, self.warmup, self.inactive = module, mode, warmup, inactive
        self._own_forward = module.__dict__.get("forward")  # e.g. set by checkpoint_blocks
        self._eager = module.forward
        self.graphed: Callable | None = None
        self.signature: tuple | None = None
        self.failure: str | None = None
        self.replays = 0
        self.eager_calls: Counter = Counter()  # reason -> training calls run eagerly
        self._pass_calls = 0
        self._pass_graphed = False
        self.active = False

    def install(self) -> GraphedModel:
        if self.mode != "off" and self.inactive is None and not self.active:
            self.module.forward = self._forward
            self.active = True
        return self

    def remove(self) -> None:
        """Put the module's eager forward back (the captured graphs are dropped)."""
        if not self.active:
            return
        self._set_forward(self._own_forward)
        self.active, self.graphed = False, None

    def _set_forward(self, forward) -> None:
        if forward is None:
            self.module.__dict__.pop("forward", None)
        else:
            self.module.forward = forward

    # ---- the guarded forward ----------------------------------------------
    def _forward(self, *args, **kwargs):
        if not (self.module.training and torch.is_grad_enabled()):
            return self._eager(*args, **kwargs)  # evaluation, not a training step
        why = self._why_eager(args, kwargs)
        if why is None and self.graphed is None:
            why = self._capture(args)
        self._pass_calls += 1
        if why is not None:
            self.eager_calls[why] += 1
            return self._eager(*args, **kwargs)
        self.replays += 1
        self._pass_graphed = True
        return self.graphed(*args)

    def _why_eager(self, args: tuple, kwargs: dict) -> str | None:
        if self.failure:
            return self.failure
        if kwargs:
            return "keyword arguments to the model"
        if not args or not all(isinstance(a, torch.Tensor) for a in args):
            return "non-tensor arguments to the model"
        if self._pass_calls:
            # A second replay would overwrite the activations the first call's backward needs.
            return "the model is called more than once per backward pass"
        if REQUIRE_CUDA and not all(a.is_cuda for a in args):
            return "inputs not on a CUDA device"
        if self.signature is not None and _signature(args) != self.signature:
            return (f"input shapes {_shapes(_signature(args))} differ from the captured "
                    f"{_shapes(self.signature)}")
        return None

    def _capture(self, args: tuple) -> str | None:
        """Capture on ``args``'s shapes; the reason it failed, or None."""
        saved = [b.detach().clone() for b in self.module.buffers()]
        self._set_forward(self._own_forward)  # capture calls the module: reach the eager forward
        try:
            sample = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
            make_graphed_callables(self.module, sample, num_warmup_iters=self.warmup)  # type: ignore[misc]  # None: refused
            self.graphed = self.module.forward  # the replaying forward it installed
            self.signature = _signature(args)
        except Exception as err:  # noqa: BLE001 - not capturable: eager, with the reason
            if self.mode == "strict":
                raise
            self.failure = f"capture failed: {failure_reason(err)[:200]}"
            print(f"kagglekit: CUDA-graph {self.failure}; training eagerly", file=sys.stderr)
        finally:
            # Warm-up passes are not training: BatchNorm statistics go back to before them.
            with torch.no_grad():
                for buf, value in zip(self.module.buffers(), saved):
                    buf.copy_(value)
            self.module.forward = self._forward
        return self.failure

    def begin_pass(self, first: bool) -> None:
        """Before a micro-batch's forward and backward.

        A replayed backward hands autograd its static gradient buffers, which a
        parameter without a gradient adopts as ``.grad``; the next replay would
        overwrite what was accumulated there (pytorch/pytorch#181723). So after a
        replayed pass, gradients are copied out before the next pass of the step.
        """
        if not first and self._pass_graphed:
            with torch.no_grad():
                for p in self.module.parameters():
                    if p.grad is not None:
                        p.grad = p.grad.clone()
        self._pass_calls, self._pass_graphed = 0, False

    @property
    def status(self) -> str:
        """One line for FitResult: replayed or eager, and why."""
        if self.mode == "off":
            return "off"
        if self.inactive:
            return f"eager ({self.inactive})"
        total = self.replays + sum(self.eager_calls.values())
        if total == 0:
            return "not used (no training forward ran)"
        text = f"cuda graph: {self.replays} of {total} training forwards replayed"
        if self.eager_calls:
            text += "; eager: " + "; ".join(f"{n} x {why}"
                                           for why, n in self.eager_calls.most_common(3))
        return text


def for_fit(model: torch.nn.Module, mode: str, device: torch.device) -> GraphedModel:
    """The graph guard for ``fit``'s (possibly DDP-wrapped) model, or an inactive one.

    Raises before any training when ``mode="strict"`` cannot work on this setup.
    """
    if mode not in MODES:
        raise ValueError(f"cuda_graphs={mode!r} must be one of {MODES}")
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    inner: torch.nn.Module = model.module if ddp else model  # type: ignore[assignment]  # DDP's module
    why = None
    if REQUIRE_CUDA and device.type != "cuda":
        why = "CUDA graphs need a CUDA device"
    elif isinstance(model, torch.nn.DataParallel):
        why = "DataParallel copies the model on every call; use kk.launch(strategy='ddp')"
    elif make_graphed_callables is None:
        why = "this torch build has no torch.cuda.make_graphed_callables"
    if why and mode == "strict":
        raise ValueError(f"cuda_graphs='strict' cannot work here: {why}. Pass cuda_graphs='auto' "
                         "to train eagerly instead.")
    # DDP needs 11 warm-up iterations before capture (make_graphed_callables' docs).
    return GraphedModel(inner, mode, warmup=11 if ddp else 3, inactive=why if mode != "off" else None)
