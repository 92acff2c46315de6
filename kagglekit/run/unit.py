"""A unit of work: done once, resumed across sessions, carried to the next kernel version.

A model's training, one fold, a cached result, a search: work that must be done once, may span
several sessions and must reach the next kernel version. ``run.unit(name, config=, data=,
code=)`` gives it one identity (its config without run control, or the names of the parameters
it depends on; its data's fingerprint; its code's version: the source of what ``code`` names and
of the notebook's functions and classes that reaches) and one key (``keys.key``) that names
everything it leaves::

    cache/<name>/<key>/          its result                 unit.cached(fn)
    checkpoints/<name>/<key>/    its fits' checkpoints      kk.fit(..., checkpoints=unit.checkpoints())
    tune/<name>-<key>.db         its search's study         kk.tune.best(..., study=unit.study)

Not finished is one exception, ``Unfinished``: a fit given a unit's checkpoints raises it when
the session's deadline cuts it short (after saving), ``launch`` carries it back from a rank by
type, ``cached`` stores nothing, and the next version resumes the fit from its checkpoint.
``fits(seconds)`` says whether one more unit fits the session's time left. A unit found done
carries its finished checkpoints into this output (``cached`` does it): the version after
next, and Kaggle's scoring rerun, still find the weights it predicts with.

Run control (``# [run]`` parameters) is not the identity: a finished training asked for more
``epochs`` has the same key, so its fit trains on from its checkpoint, and its cached result,
stored under the old ``epochs``, is recomputed in place (``keys.shaping``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..machine.budget import Unfinished
from ..state import keys
from ..state.checkpoint import CheckpointManager
from ..state.identity import Identity

ESTIMATE_MARGIN = 1.2  # a unit is started only when the time left holds 1.2 of its estimate


@dataclass(frozen=True)
class Unit:
    run: object  # the run context (kk.start's)
    name: str
    config: dict  # as given, run control included (kept in sidecars and the cache's meta)
    fingerprint: str  # the data's ("" without data)
    code: object  # what code= named (its version is part of the key)
    key: str

    @classmethod
    def of(cls, run, name: str, config=None, data=None, code=None) -> Unit:
        """``config``: a dict, or the names of the notebook parameters the unit depends on."""
        if not name or "/" in name:
            raise ValueError(f"unit name {name!r} must be a non-empty name without '/': it names "
                             "the unit's cache, checkpoint and study folders")
        if isinstance(config, (list, tuple)):
            config = _parameters(run.config, name, config)
        return cls.keyed(run, name, dict(config or {}),
                          keys.fingerprint(data) if data is not None else "", code)

    @classmethod
    def keyed(cls, run, name: str, config: dict, fingerprint: str, code) -> Unit:
        """The unit of data already fingerprinted (the folds of one data set)."""
        return cls(run, name, config, fingerprint, code,
                   keys.key(config, code=code, run_control=run.run_control, content=fingerprint))

    @property
    def shaping(self) -> dict:
        """The run-control values its result depends on (``epochs``; see ``keys.shaping``)."""
        return keys.shaping(self.config, self.run.run_control)

    @property
    def study(self) -> str:
        """Its search's study name (``tune/<study>.db``)."""
        return f"{self.name}-{self.key}"

    @property
    def done(self) -> bool:
        """Is its result stored (here or in the previous version's output)?"""
        return self.run.cache.has(self.name, self.key, self.shaping)

    def fits(self, seconds: float | None) -> bool:
        """Does the session's time left hold one more unit of about ``seconds`` (None: not
        known yet, so yes)?"""
        return seconds is None or self.run.budget().allows(ESTIMATE_MARGIN * seconds)

    def cached(self, fn):
        """``fn()``'s result, stored under this unit's key; a stored one is returned without
        running ``fn`` (its finished checkpoints carried into this output). ``fn`` raising
        ``Unfinished`` stores nothing: the next version resumes it."""
        run, cache = self.run, self.run.cache
        value = cache.compute(self.name, self.key, fn, config=self.config, shaping=self.shaping)
        hit = cache.events[-1]["hit"]  # compute's own record of this entry
        if hit:
            self.carry()
        run.chain[f"cache:{self.name}"] = "hit" if hit else "computed"
        run.log(cache=cache.stats(), chain=run.chain)
        return value

    def attempt(self, fn):
        """``cached(fn)`` at a notebook's top: None when the session's time cut it short (said,
        logged as pending, and left for the next version, which resumes it)."""
        try:
            return self.cached(fn)
        except Unfinished as stopped:
            print(f"kagglekit: {stopped}", flush=True)
            self.run.chain[f"cache:{self.name}"] = "pending"
            self.run.log(chain=self.run.chain)
            return None

    def checkpoints(self, *, monitor: str | None = None, mode: str = "min", keep_last: int = 2,
                    save_frozen: bool = True, model=None) -> CheckpointManager:
        """Its fits' checkpoints: ``checkpoints/<name>/<key>``, also found in the inputs. A fit
        given them raises ``Unfinished`` when the session's deadline cuts it short. ``model``:
        bound to that model already (``finished()``, ``restore_best(model)`` outside a fit)."""
        manager = CheckpointManager(self.run.output_dir / "checkpoints" / self.name, monitor=monitor,
                                    mode=mode, keep_last=keep_last, run_control=self.run.run_control,
                                    config=self.config, unit=self.key, fingerprint=self.fingerprint,
                                    save_frozen=save_frozen)
        bare = Identity(keys.without(self.config, self.run.run_control), self.fingerprint, unit=self.key)
        return manager.bind(manager.identity_for(None, model) if model is not None else bare)

    def carry(self) -> bool:
        """Its newest finished checkpoint copied from the inputs into this output, if it has
        one there and none here (a unit skipped whole trains no fit that would carry it)."""
        return self.checkpoints().carry_finished()


def _parameters(config: dict, unit: str, names) -> dict:
    """The run's parameters ``names``, refused by name when one is not a parameter."""
    unknown = [n for n in names if n not in config]
    if unknown:
        raise ValueError(f"unit {unit!r}: {', '.join(map(repr, unknown))} is not a parameter of this notebook "
                       f"(config= names its parameters: one of {', '.join(sorted(config))})")
    return {n: config[n] for n in names}
