"""What a checkpoint trains: its config, its data and its model.

A checkpoint resumes only into the run it belongs to. Hyperparameters alone do not
say that: the same config on another dataset (CiteSeer's checkpoint offered to a
Cora run, a re-generated CSV in the same ``data_dir``, a new dataset version
mounted at the same Kaggle path) would resume weights trained on other data, or
crash inside ``load_state_dict`` when the shapes differ. An ``Identity`` holds all
three; its ``key`` names the run's checkpoint folder, so runs of other identities
never meet, and ``differences`` says in words why another run's checkpoint is not
resumed. A fit inside a unit of work (``run.unit``) is keyed by the unit's key (config, data,
code): its folder is the one the unit's cache entry and study are named by, and a checkpoint
there of another model is refused with the fix (``model_conflict``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from ..parallel import ranks
from . import keys

# Parameters that change how long or how safely a run trains, not what it learns: a
# checkpoint written under other values of these is still resumed (more epochs train on
# from it). A notebook declares its own with ``# [run]`` (``params.run_control``); these
# are the kit's list, used where it declares none, and the three that always are. ``smoke``
# is none of them: its overrides change what a run is (blend's rows and folds), so a smoke
# run is a configuration, and a run folder, of its own.
ALWAYS_RUN_CONTROL = frozenset({"force_retrain", "time_budget_s", "save_every_min"})
DEFAULT_RUN_CONTROL = ALWAYS_RUN_CONTROL | {"epochs", "max_steps", "processes", "cuda_graphs"}


def config_changes(saved: dict, current: dict, run_control=DEFAULT_RUN_CONTROL) -> str:
    """"name: old -> new" for every config key that differs (run-control keys aside)."""
    keys = (set(saved) | set(current)) - set(run_control)
    diffs = [f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in sorted(keys)
             if saved.get(k) != current.get(k)]
    return ", ".join(diffs)


def model_signature(model: torch.nn.Module) -> dict:
    """``{name: [dtype, *shape]}`` of every parameter and buffer (the bare module's)."""
    return {k: [str(v.dtype).removeprefix("torch."), *v.shape]
            for k, v in ranks.unwrap(model).state_dict().items()}


def describe(data) -> str:
    """A short human description of ``data`` (shapes, file names) for messages."""
    if isinstance(data, torch.Tensor):
        return f"tensor{list(data.shape)}"
    if isinstance(data, (list, tuple)):
        return "[" + ", ".join(describe(d) for d in data[:4]) + (", ..." if len(data) > 4 else "") + "]"
    if hasattr(data, "tensors"):
        return "TensorDataset(" + ", ".join(describe(t) for t in data.tensors) + ")"
    if hasattr(data, "dataset") and hasattr(data, "indices"):
        return f"Subset({len(data.indices)} of {describe(data.dataset)})"
    text = str(getattr(data, "name", None) or data)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Identity:
    config: dict = field(default_factory=dict)  # run-control keys removed
    data: str = ""  # content fingerprint; "" when the data is not known
    data_summary: str = ""
    model: dict = field(default_factory=dict)  # model_signature()
    run_control: frozenset = field(default=DEFAULT_RUN_CONTROL, compare=False)
    unit: str = ""  # the key of the unit of work this fit belongs to ("" outside any)

    @classmethod
    def of(cls, config: dict | None, model: torch.nn.Module, data=None,
           fingerprint: str | None = None, run_control=DEFAULT_RUN_CONTROL, unit: str = "") -> Identity:
        """The identity of training ``model`` on ``data`` with ``config`` (its ``run_control``
        keys left out: they say how long a run trains, not what it is).

        ``fingerprint``: the data's fingerprint when already known (else computed).
        """
        if data is not None and fingerprint is None:
            fingerprint = keys.fingerprint(data)
        return cls(keys.without(config, run_control), fingerprint or "",
                   describe(data) if data is not None else "", model_signature(model),
                   frozenset(run_control), unit)

    @property
    def key(self) -> str:
        """The name of this identity's checkpoint folder: its unit's key, else the same
        derivation over its config, data and model."""
        return self.unit or keys.derive(self.config, self.data, self.model)

    def model_conflict(self, other: dict) -> str:
        """Within one unit's folder: how a checkpoint's model (``other``, a sidecar's identity)
        differs from this fit's ("" when it does not, or the sidecar does not say)."""
        saved = other.get("model")
        return _model_changes(saved, self.model) if saved else ""

    def as_dict(self) -> dict:
        out = {**asdict(self), "key": self.key}
        out.pop("run_control")
        if not self.unit:
            out.pop("unit")
        return out

    def differences(self, other: dict) -> list[str]:
        """Why a checkpoint whose sidecar holds ``other`` (``as_dict``) is not this run's."""
        diffs = []
        changed = config_changes(other.get("config", {}), self.config, self.run_control)
        if changed:
            diffs.append(f"a different config ({changed})")
        if other.get("data", "") != self.data:
            diffs.append(f"different data ({_short(other)} -> {_short(self.as_dict())})")
        model = _model_changes(other.get("model", {}), self.model)
        if model:
            diffs.append(f"a different model ({model})")
        return diffs


def _short(identity: dict) -> str:
    fp = identity.get("data") or "not fingerprinted"
    summary = identity.get("data_summary")
    return f"{summary}, fingerprint {fp[:10]}" if summary else f"fingerprint {fp[:10]}"


def _model_changes(saved: dict, current: dict, show: int = 3) -> str:
    """The first few parameters whose shape or dtype differs, or that only one side has."""
    lines = []
    for name in list(dict.fromkeys([*current, *saved])):
        old, new = saved.get(name), current.get(name)
        if old == new:
            continue
        if old is None:
            lines.append(f"{name} is new")
        elif new is None:
            lines.append(f"{name} is gone")
        else:
            lines.append(f"{name}: {old[0]} {old[1:]} -> {new[0]} {new[1:]}")
    more = f" and {len(lines) - show} more" if len(lines) > show else ""
    return "; ".join(lines[:show]) + more
