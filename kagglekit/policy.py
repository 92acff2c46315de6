"""The run policy: what every fit of one run must agree on, decided once.

``kk.start`` builds it from the notebook's parameters (output folder, config,
``force_retrain``, ``time_budget_s``, ``precision``) plus an index of the attached
inputs, and installs it in the process. ``launch`` and ``tune.optimize`` send it
into every rank and worker, so a fit deep inside a launched function resumes,
retrains or stops exactly as the notebook asked without passing anything by hand.
An explicit argument to ``fit`` still wins over the policy.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import inputs
from .budget import Budget


@dataclass(frozen=True)
class Policy:
    output_dir: Path
    config: dict = field(default_factory=dict)
    force_retrain: bool = False  # every fit starts over, every cache entry is recomputed
    deadline: float | None = None  # unix time; None: Kaggle's session limit on Kaggle
    precision: str = "auto"  # as asked; each device resolves it once (precision.resolve)
    inputs: inputs.InputIndex | None = None
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # this kernel run

    @classmethod
    def from_config(cls, config: dict, output_dir: Path, input_roots: list[Path]) -> "Policy":
        budget_s = float(config.get("time_budget_s") or 0)
        return cls(output_dir=Path(output_dir), config=dict(config),
                   force_retrain=bool(config.get("force_retrain")),
                   deadline=time.time() + budget_s if budget_s > 0 else None,
                   precision=str(config.get("precision") or "auto"),
                   inputs=inputs.index(input_roots))

    @property
    def resume(self) -> bool:
        return not self.force_retrain

    def budget(self) -> Budget:
        """The run's deadline: shared by every fit and trial of the run."""
        return Budget(deadline=self.deadline) if self.deadline else Budget.resolve(None)

    def checkpoints(self, name: str, **options):
        """The CheckpointManager of fit ``name``: ``<output>/checkpoints/<name>``."""
        from .checkpoint import CheckpointManager
        return CheckpointManager(self.output_dir / "checkpoints" / name, **options)

    def cache(self):
        from .cache import Cache
        return Cache(self.output_dir / "cache", force=self.force_retrain)


_current: Policy | None = None


def current() -> Policy | None:
    """The policy installed in this process (None outside a ``kk.start`` run)."""
    return _current


def install(policy: Policy | None) -> None:
    """Make ``policy`` this process's (``start`` here; ``launch``/``tune`` in workers)."""
    global _current
    _current = policy
    if policy is not None and policy.inputs is not None:
        inputs.adopt(policy.inputs)
