"""What a training run carries between steps: its parts, state, early stopping, result.

``Parts`` are the live objects a loop trains (shared by the step and the
checkpoints, which may switch precision under them); ``LoopState`` is what goes
into every checkpoint; ``FitResult`` is what ``fit`` returns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..machine import precision as precision_mod
from . import monitor, scalerhealth
from .ema import Averaged
from .fitoptions import Stop


@dataclass
class EarlyStopping:
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs."""
    monitor: str = "val_loss"
    mode: str = "min"
    patience: int = 5
    min_delta: float = 0.0
    best: float | None = None
    bad_epochs: int = 0

    def update(self, record: dict) -> bool:
        value = record.get(self.monitor)
        if value is None or not math.isfinite(value):
            raise KeyError(f"early stopping monitors {self.monitor!r}, but the epoch record has "
                           f"{sorted(record)}; pass monitor= one of those")
        sign = 1 if self.mode == "min" else -1
        if self.best is None or sign * (self.best - value) > self.min_delta:
            self.best, self.bad_epochs = value, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience

    def state_dict(self) -> dict:
        return {"best": self.best, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.bad_epochs = state["best"], state["bad_epochs"]


@dataclass
class LoopState:
    """Where training stands; everything here goes into the checkpoint."""
    step: int = 0
    epoch: int = 0
    batches_done: int = 0  # batches of ``epoch`` already trained on
    loss_sum: float = 0.0  # train loss of the epoch (sum of step means); read summed_loss()
    loss_steps: int = 0
    samples: int = 0  # samples trained on in this session (for samples/s)
    epoch_samples: int = 0  # samples of the current epoch on this rank
    split: int = 1  # each loader batch is cut into this many chunks (OOM back-off)
    oom_events: list = field(default_factory=list)
    history: list = field(default_factory=list)
    precision: str = ""  # "fp32" once a non-finite fp16 loss made the run give fp16 up
    precision_events: list = field(default_factory=list)
    precision_choice: dict = field(default_factory=dict)  # precision="auto": what the probe measured
    length: dict | None = None  # the length it trains to (schedule.Length.as_dict())
    stopped: str = ""  # why a finished run stopped (completed, early_stopping, ...)
    # Not saved: set by hooks; the step losses not yet in ``loss_sum``.
    stop_requested: bool = False
    save_requested: bool = False
    unsummed: list = field(default_factory=list, repr=False)

    def add_loss(self, loss) -> None:
        """Count one step's mean loss (a tensor on the device; no host sync). Summed when
        read: ``fit``'s NaN check reads the sum every 16 steps, so one stack-and-add per 16
        steps instead of an add (a kernel launch on a GPU) per step."""
        self.unsummed.append(loss)
        self.loss_steps += 1

    def summed_loss(self):
        """The epoch's loss sum, the steps not yet summed included."""
        if self.unsummed:
            self.loss_sum = self.loss_sum + torch.stack(self.unsummed).sum()
            self.unsummed.clear()
        return self.loss_sum

    def request_stop(self) -> None:
        self.stop_requested = True

    def request_checkpoint(self) -> None:
        self.save_requested = True

    def to_dict(self) -> dict:
        loss = float(self.summed_loss())
        return {"step": self.step, "epoch": self.epoch, "batches_done": self.batches_done,
                "loss_sum": loss, "loss_steps": self.loss_steps, "history": self.history,
                "split": self.split, "oom_events": self.oom_events,
                "epoch_samples": self.epoch_samples, "precision": self.precision,
                "precision_events": self.precision_events, "length": self.length,
                "stopped": self.stopped, "precision_choice": self.precision_choice}

    @classmethod
    def from_dict(cls, loop: dict) -> LoopState:
        return cls(step=loop["step"], epoch=loop["epoch"], batches_done=loop["batches_done"],
                   loss_sum=loop["loss_sum"], loss_steps=loop["loss_steps"],
                   history=list(loop["history"]), split=loop.get("split", 1),
                   oom_events=list(loop.get("oom_events", [])),
                   epoch_samples=loop.get("epoch_samples", 0), precision=loop.get("precision", ""),
                   precision_events=list(loop.get("precision_events", [])),
                   length=loop.get("length"), stopped=loop.get("stopped", ""),
                   precision_choice=dict(loop.get("precision_choice") or {}))


@dataclass
class Parts:
    """The live objects of one training run. ``amp`` (the precision and its GradScaler) may
    change mid-run (automatic fp16 giving up for fp32); ``state`` is replaced on a roll-back."""
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    amp: precision_mod.Amp
    device: torch.device
    state: LoopState = field(default_factory=LoopState)
    ema: Averaged | None = None  # the weights' moving average, when the fit keeps one

    def fall_back_to_fp32(self) -> None:
        """Give fp16 up for the rest of the run (its GradScaler with it)."""
        self.amp = precision_mod.Amp(precision_mod.Precision("fp32", self.device.type))


TIMELINE_POINTS = 300  # GPU samples per GPU in summary(): enough to plot, small for JSON


def _thin(samples: list[dict], points: int) -> list[dict]:
    """At most ``points`` evenly spaced samples per GPU."""
    out = []
    for gpu in sorted({s["gpu"] for s in samples}):
        rows = [s for s in samples if s["gpu"] == gpu]
        out += rows[::max(1, math.ceil(len(rows) / points))]
    return out


@dataclass
class FitResult:
    history: list
    steps: int
    epochs: int
    stopped: str  # a fitoptions.Stop (a str): completed, max_steps, time_budget, ...
    seconds: float
    precision: str
    compile: str
    cuda_graphs: str = "off"
    resumed_from: str | None = None
    checkpoint: str | None = None
    steps_this_session: int = 0
    world_size: int = 1
    samples_per_s: float = 0.0  # all ranks together, this session
    oom_events: list = field(default_factory=list)
    precision_events: list = field(default_factory=list)  # fp16 given up after a NaN/inf loss
    precision_probe: dict = field(default_factory=dict)  # precision="auto": rates, the choice and why
    breakdown: dict = field(default_factory=dict)  # StepTimer.summary()
    gpu: dict = field(default_factory=dict)  # GPUSampler.summary()
    gpu_samples: list = field(default_factory=list)
    session: str = ""  # the run (kk.start) that trained: tells a cached summary from a fresh one
    extended: str | None = None  # a finished run asked for more: from which length to which
    loader_workers: int = 0  # the training loader's worker processes (per rank)

    def __post_init__(self):
        # A plain str, equal to its Stop member: a result saved with torch.save (a cached
        # value, a job's output) loads with weights_only=True, which refuses the enum class.
        self.stopped = str(self.stopped)

    def diagnosis(self) -> dict:
        """Why the GPU sat idle (or that it did not), with advice."""
        return monitor.diagnose(self.breakdown, self.gpu, len(self.oom_events))

    @property
    def weights_file(self) -> str:
        """The checkpoint that holds the trained weights: the one this fit saved, or the one a
        finished fit found again (it saves nothing new)."""
        saved = self.checkpoint or self.resumed_from
        if saved is None:
            raise ValueError("this fit was given no checkpoints: it saved no weights file")
        return saved

    @property
    def finished(self) -> bool:
        """Trained to its end (or stopped for good): not cut short by the session's time."""
        return self.stopped != Stop.TIME_BUDGET

    def summary(self) -> dict:
        """Facts for metrics.json: the last epoch's scores and the run's figures, flat, and the
        epochs' records (``history``): what a launched rank hands back of its fit."""
        last = self.history[-1] if self.history else {}
        scores = {k: v for k, v in last.items() if isinstance(v, (int, float))
                  and k not in ("epoch", "step", "seconds", "samples_per_s")}
        return {**scores, "steps": self.steps, "epochs": self.epochs, "stopped": str(self.stopped),
                "seconds": round(self.seconds, 3), "precision": self.precision,
                "compile": self.compile, "cuda_graphs": self.cuda_graphs,
                "resumed_from": self.resumed_from, "session": self.session,
                "extended": self.extended,
                "checkpoint": self.checkpoint, "steps_this_session": self.steps_this_session,
                "world_size": self.world_size, "processes": self.world_size,
                "loader_workers": self.loader_workers, "samples_per_s": round(self.samples_per_s, 2),
                "samples_per_s_per_gpu": round(self.samples_per_s / self.world_size, 2),
                "oom_count": len(self.oom_events), "oom_events": self.oom_events,
                "precision_events": self.precision_events, "precision_probe": self.precision_probe,
                "scaler": scalerhealth.summary(self.history, self.steps),
                "step_breakdown": self.breakdown, "gpu": self.gpu,
                "gpu_timeline": _thin(self.gpu_samples, TIMELINE_POINTS),
                "diagnosis": self.diagnosis() if self.breakdown.get("sampled_steps") else None,
                "history": self.history}
