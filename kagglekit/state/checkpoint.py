"""Step-numbered training checkpoints that survive kills and Kaggle's session limit.

Layout of a checkpoint folder::

    step-00001200.pt     torch.save of the full state (loads with weights_only=True)
    step-00001200.json   sidecar: step, epoch, metrics, config, versions, sha256 of the .pt
    step-00001200-r1.pt  the same step saved by rank 1 (before a restart: it ran out of memory)

The sidecar is written after the payload, so a payload without a sidecar is an
interrupted save and is ignored. A payload whose sha256 differs from its sidecar
is corrupt: the previous checkpoint is used instead, with a warning naming both.
The last ``keep_last`` checkpoints are kept, plus the best by ``monitor``.

Discovery also searches the read-only input roots, where Kaggle mounts the output
of the kernel's previous version: a run resumes across 12-hour sessions.
"""
from __future__ import annotations

import json
import math
import shutil
import time
import warnings
from pathlib import Path

import torch

from ..machine import env
from ..parallel import ranks
from . import atomic, space
from .found import Found, scan, versions  # noqa: F401 (kk.checkpoint.Found)
from .identity import DEFAULT_RUN_CONTROL, Identity
from .keys import fingerprint
from .snapshot import load_model_state, restore, snapshot, unwrap  # noqa: F401 (kk.checkpoint.snapshot)


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped (corrupt or unreadable) in favour of an older one."""


def _better(a: float, b: float, mode: str) -> bool:
    return a < b if mode == "min" else a > b


class CheckpointManager:
    """Saves, prunes and finds checkpoints of one training run.

    ``fit`` binds the manager to its run's ``Identity`` (config, data, model): the
    checkpoints then live in ``<directory>/<identity key>/``, so a run of another
    config, data or model starts fresh in a folder of its own and never resumes
    from, prunes or deletes another run's checkpoints. Unbound (used directly),
    it reads and writes ``directory`` itself.

    Args:
        directory: where this run writes (in the working dir).
        search: extra read-only folders to look in when resuming (default: any
            folder with the same relative name under the input roots).
        keep_last: how many of the newest checkpoints to keep.
        monitor / mode: sidecar metric that decides the best checkpoint, kept too.
        data: what the run trains on (tensors, arrays, a PyG graph, files, a folder),
            fingerprinted into its identity; default: the training loader's dataset
            where it can be fingerprinted (tensors, TensorDataset and Subsets of it).
        run_control: config keys left out of the identity (how long a run trains, not
            what it is; ``Run.checkpoints`` passes the notebook's).
        config: the training's config, in every sidecar and its identity (default: the run's).
        unit / fingerprint: the key of the unit of work the training belongs to, and its data's
            fingerprint (``Unit.checkpoints``): the folder is ``<directory>/<unit key>``.
        save_frozen: False: checkpoints hold only the parameters that train (LoRA adapters, a
            head) and the buffers; the frozen base comes from the model each run builds, so
            name the base in ``config`` (``readers.pretrained.base_identity``).
    """

    def __init__(self, directory: Path | str, *, search: list[Path] | None = None,
                 keep_last: int = 2, monitor: str | None = None, mode: str = "min", data=None,
                 run_control=DEFAULT_RUN_CONTROL, config: dict | None = None, unit: str = "",
                 fingerprint: str = "", save_frozen: bool = True, save_every_min: float | None = 20.0):
        if mode not in ("min", "max"):
            raise ValueError(f"mode={mode!r} must be 'min' or 'max'")
        self.root = Path(directory)
        self._search_roots = search
        self.keep_last = max(1, keep_last)
        self.monitor, self.mode = monitor, mode
        self.data = data
        self.run_control = frozenset(run_control)
        self.config, self.unit, self.fingerprint = config, unit, fingerprint
        self.save_every_min = save_every_min  # a fit's mid-epoch saves (0: at every decision; None: epoch ends)
        self.save_frozen = save_frozen
        self.identity: Identity | None = None
        self._space_checked = False

    @property
    def directory(self) -> Path:
        """This run's folder: ``<root>/<identity key>`` once bound, else the root."""
        return self.root / self.identity.key if self.identity else self.root

    @property
    def search_roots(self) -> list[Path]:
        if self._search_roots is None:  # found once: inputs do not change during a run
            self._search_roots = self._input_mirrors()
        return self._search_roots

    @property
    def search(self) -> list[Path]:
        """The read-only folders that may hold this run's checkpoints."""
        key = self.identity.key if self.identity else None
        return [root / key if key else root for root in self.search_roots]

    def _input_mirrors(self) -> list[Path]:
        # The previous version's output holds the same "checkpoints/<name>" path.
        tail = Path(*self.root.parts[-2:])
        return [p for p in env.find_inputs(str(tail)) if p.is_dir()]

    # ---- identity ------------------------------------------------------
    def identity_for(self, config: dict | None, model: torch.nn.Module, loader=None) -> Identity:
        """The identity of training ``model`` with ``config`` on this manager's data
        (or, without it, on ``loader``'s dataset when that can be fingerprinted). A unit's
        manager gives the unit's own config, data and key."""
        config = self.config if self.config is not None else config
        data, printed = self.data, self.fingerprint or None
        if not self.unit and data is None and loader is not None:  # the loader's dataset, if it can be
            data = getattr(loader, "dataset", None)
            try:
                printed = fingerprint(data) if data is not None else None
            except TypeError:  # a custom Dataset: pass data= to know when it changes
                data = None
        return Identity.of(config, model, data, printed, self.run_control, self.unit)

    def bind(self, identity: Identity) -> CheckpointManager:
        """Keep this run's checkpoints in ``<directory>/<identity.key>`` from now on."""
        self.identity = identity
        return self

    def others(self) -> list[Found]:
        """Checkpoints of other identities (here and in the inputs), newest first."""
        if self.identity is None:
            return []
        found = []
        for root in [self.root, *self.search_roots]:
            found += scan(root)  # a flat folder from an older layout
            if root.is_dir():
                for sub in root.iterdir():
                    if sub.is_dir() and sub.name != self.identity.key:
                        found += scan(sub)
        return sorted(found, key=lambda f: -float(f.meta.get("time", 0)))

    # ---- writing -------------------------------------------------------
    def save(self, state: dict, *, step: int, epoch: int = 0, metrics: dict | None = None,
             config: dict | None = None, final: bool = False, tag: str = "") -> Path:
        """Write ``state`` atomically, then its sidecar, then prune old ones. ``tag``: a name
        of the writer's own beside the step (a rank other than 0 may save the step rank 0 is
        saving at the same moment).

        A full disk mid-write leaves the previous checkpoint as it was and raises
        CheckpointSpaceError naming the folder and the space needed."""
        payload = self.directory / f"step-{step:08d}{'-' + tag if tag else ''}.pt"
        if not self._space_checked:
            self._space_checked = True
            space.warn_if_short(self.directory, space.state_bytes(state), self.keep_last)
        # Re-saving a step (after a fallback): retire the old sidecar first, or a kill
        # between the two writes would pair it with the new payload.
        payload.with_suffix(".json").unlink(missing_ok=True)
        try:
            with atomic.atomic_path(payload) as tmp:
                torch.save(state, tmp)
        except OSError as err:
            space.raise_if_full(err, self.directory, space.state_bytes(state))
            raise
        meta = {"step": step, "epoch": epoch, "final": final, "metrics": metrics or {},
                "config": config or {}, "versions": versions(), "time": time.time(),
                "sha256": atomic.sha256_file(payload), "file": payload.name}
        if self.identity is not None:
            meta["identity"] = self.identity.as_dict()
        atomic.write_json(payload.with_suffix(".json"), meta)
        self._prune()
        return payload

    def _best(self, found: list[Found]) -> Found | None:
        scored = [f for f in found if self.monitor and _finite(f.meta["metrics"].get(self.monitor))]
        best = None
        for f in scored:
            if best is None or _better(f.meta["metrics"][self.monitor],
                                       best.meta["metrics"][self.monitor], self.mode):
                best = f
        return best

    def _prune(self) -> None:
        found = sorted(scan(self.directory), key=lambda f: f.step)
        keep = {f.path for f in found[-self.keep_last:]}
        best = self._best(found)
        if best is not None:
            keep.add(best.path)
        for f in found:
            if f.path not in keep:
                f.sidecar.unlink(missing_ok=True)  # sidecar first: never a live orphan
                f.path.unlink(missing_ok=True)
        for leftover in self.directory.glob(".*.tmp"):
            if atomic.is_temporary(leftover) and time.time() - leftover.stat().st_mtime > 3600:
                leftover.unlink(missing_ok=True)

    def clear(self) -> None:
        """Delete this run's checkpoints in the working dir (inputs are read-only);
        once bound, only this identity's folder: other runs' checkpoints stay."""
        for f in scan(self.directory):
            f.sidecar.unlink(missing_ok=True)
            f.path.unlink(missing_ok=True)

    # ---- reading -------------------------------------------------------
    def candidates(self) -> list[Found]:
        """Every checkpoint found, newest first; the working dir wins ties, then the later save
        (a rank's own save of a step rank 0 saved too carries what the restart needs)."""
        found = scan(self.directory)
        for folder in self.search:
            found += scan(folder)
        order = {p: i for i, p in enumerate([self.directory, *self.search])}
        return sorted(found, key=lambda f: (-f.step, order.get(f.path.parent, 99),
                                            -float(f.meta.get("time", 0))))

    def _carry_over(self, found: Found) -> None:
        """Copy a checkpoint found in an attached input (the previous kernel version's
        output) into this run's folder: the next version mounts *this* version's output,
        and without it there every other version would train from scratch."""
        if found.path.parent != self.directory and _writer():
            _copy(found, self.directory)

    def carry_finished(self) -> bool:
        """A unit skipped whole (its result cached, no fit runs) carries its finished
        checkpoint here all the same: two versions later, or in Kaggle's scoring rerun (which
        mounts what the submitted version mounted), the weights it predicts with would be gone.
        True when one was copied from the inputs."""
        found = self.finished()
        if found is None or found.path.parent == self.directory or not _writer():
            return False
        if any(f.meta.get("final") for f in scan(self.directory)):
            return False
        _copy(found, self.directory)
        return True

    def finished(self) -> Found | None:
        """The newest checkpoint that ended its training (``final``), here or in the inputs."""
        return next((f for f in self.candidates() if f.meta.get("final")), None)

    def best(self) -> Found | None:
        return self._best(self.candidates())

    def restore_best(self, model, averaged: bool = False) -> Found:
        """Put the best checkpoint's weights (by ``monitor``, else the newest) into ``model``;
        ``averaged``: the moving average's (``fit(..., ema=)``), refused when the fit kept none."""
        found = self.best() or next(iter(self.candidates()), None)
        if found is None:
            raise FileNotFoundError(f"no checkpoint under {self.directory} to restore")
        state = load(found)
        if not averaged:
            load_model_state(model, state["model"], state.get("model_part", "all"))
        elif "ema" not in state:
            raise ValueError(f"{found.path}: its fit kept no moving average (fit(..., ema=kk.Ema(...))): "
                             "restore_best(model) takes the training's own weights")
        else:  # AveragedModel's state: the bare model's under "module.", and its count of updates
            model.load_state_dict({k[len("module."):]: v for k, v in state["ema"].items() if k.startswith("module.")})
        return found

    def load_latest(self, map_location="cpu") -> tuple[Found, dict] | None:
        """The newest checkpoint that verifies and loads, or None.

        A corrupt or unreadable one is skipped with a CheckpointWarning that names it
        and the one used instead.
        """
        skipped = []
        for found in self.candidates():
            try:
                state = load(found, map_location)
            except Exception as err:  # noqa: BLE001 - whatever broke it, it is unusable
                skipped.append((found.path, f"{type(err).__name__}: {str(err)[:160]}"))
                continue
            for path, why in skipped:
                warnings.warn(f"checkpoint {path} is unusable ({why}); falling back to {found.path}",
                              CheckpointWarning, stacklevel=2)
            self._carry_over(found)
            return found, state
        for path, why in skipped:
            warnings.warn(f"checkpoint {path} is unusable ({why}) and no older one exists; "
                          "starting from scratch", CheckpointWarning, stacklevel=2)
        return None

    def load_file(self, payload: Path | str, map_location="cpu") -> tuple[Found, dict]:
        """The checkpoint ``payload`` (a path another rank chose), verified against its sidecar."""
        payload = Path(payload)
        found = Found(payload, json.loads(payload.with_suffix(".json").read_text()))
        return found, load(found, map_location)


def _writer() -> bool:
    return ranks.is_main()


def _copy(found: Found, folder: Path) -> None:
    """``found`` into ``folder``: the payload, then its sidecar (each atomically, as in save)."""
    dest = folder / found.path.name
    with atomic.atomic_path(dest) as tmp:
        shutil.copyfile(found.path, tmp)
    atomic.write_json(dest.with_suffix(".json"), found.meta)


def load(found: Found, map_location="cpu") -> dict:
    """Verify the payload against its sidecar's sha256, then load it safely."""
    digest = atomic.sha256_file(found.path)
    if digest != found.meta.get("sha256"):
        raise ValueError(f"sha256 mismatch (file {digest[:12]}..., sidecar "
                         f"{str(found.meta.get('sha256'))[:12]}...): truncated or corrupted")
    return torch.load(found.path, map_location=map_location, weights_only=True)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
