"""A run's length is run control: asked for more, a finished run trains on; for fewer, it says so.

A fit's length (epochs, ``max_steps``, batches per epoch, accumulation) is not part of what
the run is: a finished run asked for more epochs resumes its last checkpoint and trains up to
the new length; asked for fewer, it says so and keeps the longer run's weights.

The learning-rate schedule is the notebook's: the scheduler ``fit`` receives was built for the
new length. ``Start`` keeps it as built (its state and the optimizer's hyperparameters) before
the checkpoint is loaded; ``Start.extend`` replays it to the checkpoint's position, so training
goes on at the learning rate the new schedule defines there. Where a schedule does not depend
on the run's length (a constant rate, ``StepLR``, ``CosineAnnealingWarmRestarts``), the result
equals an uninterrupted run of the new length bit for bit; where it does (``OneCycleLR``, a
cosine over the whole run), the steps already trained followed the old schedule, and the
extension says so. A schedule that cannot reach the new length (a ``OneCycleLR`` built for
fewer steps) is refused before any training, with the fix.
"""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import asdict, dataclass

import torch


class ScheduleError(ValueError):
    """The schedule cannot run the length asked for."""


@dataclass(frozen=True)
class Length:
    """How long a fit trains: ``epochs`` passes of ``per_epoch`` batches, ``accumulate`` of
    them per optimizer step, and at most ``max_steps`` optimizer steps."""
    epochs: int
    max_steps: int | None
    per_epoch: int
    accumulate: int = 1

    @property
    def steps(self) -> int:
        """Optimizer steps in all."""
        total = self.epochs * math.ceil(self.per_epoch / self.accumulate)
        return total if self.max_steps is None else min(total, self.max_steps)

    def reached_by(self, step: int, epoch: int) -> bool:
        return epoch >= self.epochs or (self.max_steps is not None and step >= self.max_steps)

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.steps} steps ({self.epochs} epoch{'s' * (self.epochs != 1)})"


def _schedulers(scheduler) -> list:
    """The scheduler and those it chains (SequentialLR, ChainedScheduler)."""
    inner = getattr(scheduler, "_schedulers", None) or []
    return [scheduler, *[s for sub in inner for s in _schedulers(sub)]]


def check_room(scheduler, interval: str, length: Length) -> None:
    """Refuse a schedule that would raise before ``length`` ends (OneCycleLR counts its steps)."""
    needed = length.steps if interval == "step" else length.epochs
    for sched in _schedulers(scheduler):
        total = getattr(sched, "total_steps", None)
        if isinstance(sched, torch.optim.lr_scheduler.OneCycleLR) and total is not None and total < needed:
            raise ScheduleError(
                f"OneCycleLR was built for {total} {interval}s but the fit runs {needed}: build it "
                f"for the run's length (epochs={length.epochs}, steps_per_epoch="
                f"{math.ceil(length.per_epoch / length.accumulate)}), or keep the length it was "
                "built for")


class Start:
    """The scheduler and the optimizer's hyperparameters as built for this fit's length,
    kept before a checkpoint is loaded into them."""

    def __init__(self, scheduler, optimizer):
        self.scheduler_state = copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None
        self.groups = [copy.deepcopy({k: v for k, v in g.items() if k != "params"})
                       for g in optimizer.param_groups]

    def extend(self, scheduler, optimizer) -> dict:
        """Put ``scheduler`` (loaded from a checkpoint of another length) at the same position
        of the schedule it was built with; what changed, for the record."""
        if scheduler is None:
            return {"scheduler": None, "same_so_far": True}
        name = type(scheduler).__name__
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            return {"scheduler": name, "same_so_far": True}  # follows validation, not the length
        loaded = scheduler.state_dict()
        if "last_epoch" not in loaded or "last_epoch" not in self.scheduler_state:
            raise ScheduleError(f"cannot continue a {name} at another length (it keeps no position); "
                                "keep the run's length, or start over with force_retrain=True")
        done = loaded["last_epoch"] - self.scheduler_state["last_epoch"]
        before = [g["lr"] for g in optimizer.param_groups]
        for group, built in zip(optimizer.param_groups, self.groups):
            group.update(copy.deepcopy(built))
        scheduler.load_state_dict(copy.deepcopy(self.scheduler_state))
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()"
            warnings.simplefilter("ignore")
            for _ in range(done):
                scheduler.step()
        after = [g["lr"] for g in optimizer.param_groups]
        return {"scheduler": name, "position": done, "lr_before": before, "lr_now": after,
                "same_so_far": all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(before, after))}


def extension_note(saved: dict | None, length: Length, schedule: dict) -> str:
    """One line for the notebook: from which length to which, and what the schedule did."""
    old = Length(**saved).describe() if saved else "an earlier length"
    text = f"trained {old}; training on to {length.describe()}"
    if schedule.get("scheduler") and not schedule["same_so_far"]:
        text += (f". {schedule['scheduler']} depends on the run's length: its first "
                 f"{schedule['position']} steps followed the shorter schedule, the rest follow "
                 "the new one (an uninterrupted run of the new length would differ)")
    return text
