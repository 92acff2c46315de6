"""A unit of work: done once, resumed across sessions, carried to the next kernel version.

A model's training, one fold, a cached result, a search: work that must be done once, may span
several sessions and must reach the next kernel version. ``run.unit(name, config=, data=,
code=)`` gives it one identity (its config without run control, or the names of the parameters
it depends on; its data's fingerprint; its code's version: the source of what ``code`` names and
of the notebook's functions and classes that reaches, and the top-level statements that made the
notebook's values it reads) and one key (``keys.key``) that names
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

Its identity is what its code reads (``state.reads``): every notebook parameter the functions
``code`` names reach, directly or through the notebook's values, is in its key; so are the values
handed to it (``config=``: a dict of what is not a parameter, such as the searched values; and the
plain values its functions close over). A parameter leaves the identity only by name, with the
reason (``leave_out={"model_dir": "..."}``). A unit without ``code`` depends on every parameter.
The function a unit finally runs is checked against its identity (``cached``): one that reads a
parameter the key lacks, or a value made by a statement the key lacks, is refused by name. Its
identity is in metrics.json (``units``).

Run control (``# [run]`` parameters) is not the identity: a finished training asked for more
``epochs`` has the same key, so its fit trains on from its checkpoint, and its cached result,
stored under the old ``epochs``, is recomputed in place (``keys.shaping``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..machine.budget import Unfinished
from ..state import keys
from ..state.checkpoint import CheckpointManager
from ..state.identity import Identity
from ..state.reads import Reads, handed_values, made_at, trace


class RunOfAUnit(Protocol):
    """What a unit reads of the run it belongs to (``kk.start``'s Run is one): named here, so
    this module never imports the context that makes units (no circle, not even for the type checker)."""
    config: dict
    run_control: frozenset
    output_dir: Path
    chain: dict
    metrics: dict
    cache: Any  # Run's cache, precision and resume are properties: read, never set
    precision: Any
    resume: bool

    def budget(self) -> Any: ...

    def log(self, **metrics) -> None: ...

ESTIMATE_MARGIN = 1.2  # a unit is started only when the time left holds 1.2 of its estimate


@dataclass(frozen=True)
class Unit:
    run: RunOfAUnit  # the run context (kk.start's)
    name: str
    config: dict  # as given, run control included (kept in sidecars and the cache's meta)
    fingerprint: str  # the data's ("" without data)
    code: object  # what code= named (its version is part of the key)
    key: str
    reads: dict = field(default_factory=dict, compare=False)  # parameter -> how the code reaches it
    left_out: dict = field(default_factory=dict, compare=False)  # parameter -> why it is not the identity
    statements: tuple = field(default=(), compare=False)  # the notebook's statements that made what it reads
    code_digest: str = field(default="", compare=False)  # its code's version, as its key holds it

    @classmethod
    def of(cls, run, name: str, config=None, data=None, code=None, leave_out=None) -> Unit:
        """``config``: the values handed to it besides the parameters its code reads (a dict);
        ``leave_out``: ``{parameter: why it does not change the result}``."""
        if not name or "/" in name:
            raise ValueError(f"unit name {name!r} must be a non-empty name without '/': it names "
                             "the unit's cache, checkpoint and study folders")
        return cls.keyed(run, name, config, keys.fingerprint(data) if data is not None else "", code, leave_out)

    @classmethod
    def keyed(cls, run, name: str, config, fingerprint: str, code, leave_out=None) -> Unit:
        """The unit of data already fingerprinted (the folds of one data set): its config is
        the parameters ``code`` reads (every parameter without code), ``leave_out`` aside, and
        the values ``config`` hands it."""
        values, left = _values(name, config), _left_out(run, name, leave_out)
        traced, handed = _trace(run, code), handed_values(_functions(code))
        own = {p: run.config[p] for p in traced.parameters if p not in left}
        config = {**own, **({"handed": handed} if handed else {}), **values}
        version = code if not traced.functions else [*_listed(code), *traced.functions]
        key = keys.key(config, code=version, run_control=run.run_control, content=fingerprint,
                       statements=traced.statements)
        unit = cls(run, name, config, fingerprint, code, key, traced.parameters, left, traced.statements,
                   keys.code_digest(version))
        unit.record()
        return unit

    def record(self) -> None:
        """Its identity in metrics.json (``units``): what a person reads to see why it trained
        again, and what the suite checks against the notebook's code."""
        if os.getpid() != getattr(self.run, "pid", os.getpid()):
            return  # a rank's or a worker's copy: the notebook's process records it
        units = self.run.metrics.setdefault("units", {})
        units[self.name] = {"key": self.key, "left_out": self.left_out,
                            "parameters": {p: via for p, via in self.reads.items() if p not in self.left_out},
                            "values": sorted(k for k in self.config if k not in self.reads),
                            "config": keys.without(self.config, self.run.run_control),
                            "fingerprint": self.fingerprint, "code": self.code_digest,
                            "statements": list(self.statements),
                            "roots": _qualnames(self.code), "made_at": made_at(_functions(self.code))}

    def check(self, fn) -> None:
        """Refuse ``fn``, the work this unit runs, when it reads a parameter its identity does not
        hold (a stale result would be served when that parameter changes)."""
        if self.code is None:
            return  # every parameter is its identity
        missing = {p: via for p, via in _trace(self.run, fn).parameters.items()
                   if p not in self.config and p not in self.left_out and p not in keys.SESSION_ONLY}
        if missing:
            raise IdentityError(
                f"unit {self.name!r}: its work reads {', '.join(sorted(missing))} ({'; '.join(missing.values())}), "
                "which its key does not hold: name the function that reads it in code= (or leave it out by name "
                "with the reason: leave_out={name: why})")
        unkeyed = _unkeyed_statements(self, fn)
        if unkeyed:
            raise IdentityError(
                f"unit {self.name!r}: its work reads what this statement of the notebook made, which its key does "
                f"not hold: {unkeyed[0].splitlines()[0]}: make the unit after it with the function that reads it in "
                "code=, or hand its value in data=")

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

    def cached(self, fn=None, *, mapped: bool = False):
        """``fn()``'s result (``fn``: the unit's own ``code`` when it is one callable), stored
        under this unit's key; a stored one is returned without running ``fn`` (its finished
        checkpoints carried into this output). ``fn`` raising
        ``Unfinished`` stores nothing: the next version resumes it. ``fn`` reading a parameter
        the key does not hold is refused first (``check``). ``mapped``: its tensors memory-mapped
        from the stored file, hit or miss alike: for data larger than a copy per rank (decoded
        images), as a launch sends the file to the ranks, not the bytes (``parallel.mapped``)."""
        fn = self._callable(fn)
        self.check(fn)
        run, cache = self.run, self.run.cache
        value = cache.compute(self.name, self.key, fn, config=self.config, shaping=self.shaping, mapped=mapped)
        hit = cache.events[-1]["hit"]  # compute's own record of this entry
        if hit:
            self.carry()
        run.chain[f"cache:{self.name}"] = "hit" if hit else "computed"
        run.log(cache=cache.stats(), chain=run.chain)
        return value

    def _callable(self, fn):
        if fn is None and not callable(self.code):  # code= a list: which one computes the result?
            raise TypeError(f"unit {self.name!r}: cached() needs its function when code= is not one: {self.code!r}")
        return self.code if fn is None else fn

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
                    save_frozen: bool = True, model=None, save_every_min: float | None = None) -> CheckpointManager:
        """Its fits' checkpoints: ``checkpoints/<name>/<key>``, also found in the inputs. A fit
        given them raises ``Unfinished`` when the session's deadline cuts it short. ``model``:
        bound to that model already (``finished()``, ``restore_best(model)`` outside a fit).
        ``save_every_min``: the fit's mid-epoch saves; default the notebook's parameter, else 20."""
        every = self.run.config.get("save_every_min", 20.0) if save_every_min is None else save_every_min
        manager = CheckpointManager(self.run.output_dir / "checkpoints" / self.name, monitor=monitor,
                                    mode=mode, keep_last=keep_last, run_control=self.run.run_control,
                                    config=self.config, unit=self.key, fingerprint=self.fingerprint,
                                    save_frozen=save_frozen, save_every_min=every)
        bare = Identity(keys.without(self.config, self.run.run_control), self.fingerprint, unit=self.key)
        return manager.bind(manager.identity_for(None, model) if model is not None else bare)

    def resumes(self) -> bool:
        """A fit of this unit will go on from a checkpoint of it (here or in the inputs; never under
        ``force_retrain``): the weights it starts from are that checkpoint's, so what only sets the
        starting weights (a probe fitted as the first head, LP-FT) need not be computed again."""
        return bool(self.run.resume and self.checkpoints().candidates())

    def carry(self) -> bool:
        """Its newest finished checkpoint copied from the inputs into this output, if it has
        one there and none here (a unit skipped whole trains no fit that would carry it)."""
        return self.checkpoints().carry_finished()


class IdentityError(ValueError):
    """A unit's work reads a parameter its key does not hold, or ``leave_out`` names no parameter
    or gives no reason."""


def _values(unit: str, config) -> dict:
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise IdentityError(f"unit {unit!r}: config= holds the values handed to it besides the notebook's "
                            f"parameters, as a dict (got a {type(config).__name__}); the parameters its code "
                            "reads are found from code=")
    return dict(config)


def _left_out(run, unit: str, leave_out) -> dict:
    left = dict(leave_out or {})
    unknown = [n for n in left if n not in run.config]
    if unknown:
        raise IdentityError(f"unit {unit!r}: leave_out names {', '.join(map(repr, unknown))}, not a parameter of "
                            f"this notebook (its parameters: {', '.join(sorted(run.config))})")
    unexplained = [n for n, why in left.items() if not isinstance(why, str) or not why.strip()]
    if unexplained:
        raise IdentityError(f"unit {unit!r}: leave_out={{{unexplained[0]!r}: ...}} needs its reason, a sentence "
                            "that says why its value does not change the unit's result")
    return left


# What the run context makes of the parameters for every piece of work: the precision every fit
# computes in, and the seed that start() gives every generator.
THROUGH_THE_RUN = (("precision", "run.precision: every fit computes in it"), ("seed", "run: start() seeds with it"))


def _listed(code) -> list:
    return [r for r in (code if isinstance(code, (list, tuple)) else [code]) if r is not None]


def _functions(code) -> list:
    """What ``code`` names besides text: functions, classes, partials."""
    return [r for r in _listed(code) if not isinstance(r, str)]


def _qualnames(code) -> list[str]:
    """What ``code`` names, as a person finds it in the notebook (``search.<locals>.objective``)."""
    roots = code if isinstance(code, (list, tuple)) else [] if code is None else [code]
    return [getattr(keys.code_of(r) or r, "__qualname__", str(r)) for r in roots]


def _unkeyed_statements(unit: Unit, fn) -> list[str]:
    """The notebook's statements ``fn`` reads that ``unit``'s key lacks (a value made after the unit, or
    that its code never reads). Another unit it reads stands for its key (not followed), and work of
    another module (the kit's own wrapper of a fold's work) is that module's, versioned with it."""
    own, root = keys.code_of(fn), next(iter(_functions(unit.code)), None)
    root = keys.code_of(root) or root
    if own is None or getattr(own, "__module__", None) != getattr(root, "__module__", ""):
        return []
    return [s for s in _trace(unit.run, fn, opaque=(Unit,)).statements if s not in unit.statements]


def _trace(run, code, opaque: tuple = ()) -> Reads:
    """What ``code`` reads (``state.reads``): the run's parameters, with what the run context
    carries into any work (``THROUGH_THE_RUN``), and the notebook's statements and functions on
    the way; every parameter without code."""
    if code is None:
        return Reads({p: "no code= given: every parameter" for p in run.config})
    roots = _functions(code)
    if not roots:  # a version given as text: what it reads is not known
        return Reads({p: "code= given as text: every parameter" for p in run.config})
    found = trace(roots, run.config, opaque=(type(run), *opaque))
    through = {p: why for p, why in THROUGH_THE_RUN if p in run.config}
    return Reads({**through, **found.parameters}, found.statements, found.functions)
