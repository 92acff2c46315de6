"""The clean process every rank, search worker and ``isolated()`` child is forked from.

A child forked from the notebook's own process inherits what the notebook did before it: a GPU
driver the notebook opened (CUDA then fails in the child: "Cannot re-initialize CUDA in forked
subprocess"), or GNU OpenMP's thread pool once LightGBM, XGBoost or a multithreaded torch op
ran there (the child's first parallel region then waits forever for threads that did not
survive the fork). Accelerate's ``notebook_launcher`` and Lightning's ``ddp_notebook`` refuse
or fail in both cases.

Python's fork server avoids both. It is a fresh interpreter, started by exec and never forked
from the notebook, that imports torch, the kit and the heavy libraries the notebook imported,
then only forks. Being exec'd, it is clean whenever it starts: it starts at the first launch
(about 3 s of imports, once per notebook process; a kernel version that finds its work done
never pays them). Each child is a fork of it, taking milliseconds, whatever the notebook has
done since (benchmarks/launch_start.py).

What a child runs travels by value (cloudpickle): functions, classes and lambdas defined in the
notebook, and everything they refer to. With them go the notebook's environment variables
(read again at each start, so a restart's smaller batches reach the new ranks) and its working
folder. Unlike with a fork, the data they refer to is copied, except tensors memory-mapped from a
file (``mapped``: a unit's value cached with ``mapped=True``), which travel as the file: ``pack``
names the largest object when the payload is large. An object that cannot travel (an open file,
a lock, a generator) is named with the fix before any process starts (``Unsendable``).
"""
from __future__ import annotations

import importlib
import io
import multiprocessing as mp
import os
import sys
import types
from multiprocessing import context as mp_context, forkserver as mp_forkserver, popen_forkserver, util as mp_util

import torch

from . import mapped

try:
    import cloudpickle
except ImportError:  # an image without it still has scikit-learn's joblib, which carries a copy
    from joblib.externals import cloudpickle

# torch, torch.distributed and the kit's launch path; torch._dynamo, which every optimizer's
# first construction imports (1.4 s per child otherwise). Imports only: no thread, no OpenMP.
PRELOAD = ["kagglekit.parallel.launcher", "kagglekit.loop.train", "torch._dynamo"]
# Heavy libraries the server imports too when the notebook already has (its first cell imports
# them before kk.start warms the server): every rank and search worker would import them again.
ALSO_WHEN_IMPORTED = ("torch_geometric", "transformers", "peft", "lightgbm", "xgboost", "catboost",
                      "optuna", "sklearn", "pandas")
# What those libraries import on first use, which the notebook may never use itself but each child
# does: transformers' auto classes (every model a rank builds from a name or a config), and the
# migrations optuna's database storage checks when a search worker opens the study.
LAZY = {"transformers": ("transformers.models.auto.modeling_auto",),
        "optuna": ("alembic.command", "alembic.config", "alembic.migration", "alembic.script",
                   "sqlalchemy.orm", "sqlalchemy.dialects.sqlite")}
# Imported last: the rest of a child's imports (named in SERVER_IMPORTS), then the collector frozen.
LAST = "kagglekit.parallel.serverimports"
SERVER_IMPORTS = "KAGGLEKIT_SERVER_IMPORTS"  # set only while the server starts
SERVER_IMPORTS_MAX = 100_000  # characters: under Linux's 128 KiB for one environment string
LARGE_BYTES = 1 << 30  # a payload above this is named: each process gets its own copy
_PREPARED = ("name", "authkey", "sys_path", "sys_argv", "dir", "orig_dir", "log_to_stderr",
             "log_level")


class Unsendable(TypeError):
    """Something the launched function needs cannot be sent to another process."""


def context():
    """multiprocessing's fork-server context, with the kit's modules preloaded in the server
    (and the heavy libraries this process has imported)."""
    ctx = mp.get_context("forkserver")
    imported = [m for m in ALSO_WHEN_IMPORTED if m in sys.modules]
    ctx.set_forkserver_preload(PRELOAD + imported + [LAST])  # read when the server starts, then fixed
    return ctx


def _server_imports() -> str:
    """The modules the server imports last (serverimports): the submodules of the heavy
    libraries and of the kit this process has imported, and the libraries' lazily built ones."""
    roots = ("kagglekit",) + tuple(m for m in ALSO_WHEN_IMPORTED if m in sys.modules)
    lazy = [n for root in roots for n in LAZY.get(root, ())]
    names = sorted({n for n in list(sys.modules) if n.split(".", 1)[0] in roots and "." in n} - set(lazy))
    joined = ",".join(lazy + names)
    # One environment string longer than the kernel's limit (128 KiB) fails the server's exec: the
    # list is a speed-up, so it is cut at the last whole name before that
    return joined if len(joined) <= SERVER_IMPORTS_MAX else joined[:joined.rfind(",", 0, SERVER_IMPORTS_MAX)]


def warm() -> None:
    """Start the server, if it is not running (the first child does). It starts with this
    process's ``sys.path`` as its PYTHONPATH: a kit installed into a folder put on ``sys.path``
    (as the pushed notebook's first cell does) is then preloaded, not imported again by every
    child."""
    context()
    started_with = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p), SERVER_IMPORTS: _server_imports()}
    before = {name: os.environ.get(name) for name in started_with}
    os.environ.update(started_with)
    try:
        mp_forkserver.ensure_running()
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def server_pid() -> int | None:
    """The running server's process id (None before the first start)."""
    return getattr(mp_forkserver._forkserver, "_forkserver_pid", None)


class _Popen(popen_forkserver.Popen):
    """multiprocessing's fork-server start, less two of its preparations: running the parent's
    main module again in the child (a script would rerun itself, the notebook's kernel module
    would be imported for nothing) and making the fork server the child's start method (a
    rank's DataLoader workers fork from the rank, as they do on Kaggle, so that datasets
    defined in the notebook reach them). The same as CPython 3.11's, 3.12's and 3.13's otherwise."""

    def _launch(self, process_obj):
        from multiprocessing import reduction, spawn
        prep_data = {k: v for k, v in spawn.get_preparation_data(process_obj._name).items()
                     if k in _PREPARED}
        buf = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            mp_context.set_spawning_popen(None)
        self.sentinel, w = mp_forkserver.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)  # the child's sentinel of its parent, as multiprocessing keeps it
        self.finalizer = mp_util.Finalize(self, mp_util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = mp_forkserver.read_signed(self.sentinel)


class Process(mp_context.ForkServerProcess):
    """A process forked from the clean server (not daemonic: a rank may start loader workers;
    the supervisor, not the interpreter's exit, makes sure none outlives its launch)."""

    @staticmethod
    def _Popen(process_obj):
        warm()
        return _Popen(process_obj)


class _Pickler(cloudpickle.CloudPickler):
    """cloudpickle, plus two things. A tensor memory-mapped from a file travels as that file
    (``mapped``): the processes share its pages instead of each unpacking a copy. An object a
    library registered in ``sys.modules`` that is not a plain module (``torch.classes``, a
    ModuleType subclass cloudpickle's table of types misses) travels by its name: cloudpickle
    sends the "sub-modules" a function can reach by attribute, so any launched function that
    uses torch and an attribute named ``classes`` (``data.classes``) failed with "cannot pickle
    '_Classes' object"."""

    def __init__(self, file, protocol=None):
        super().__init__(file, protocol=protocol)
        self.registered = _registered_non_modules()  # once per payload: sys.modules holds thousands

    def reducer_override(self, obj):
        name = self.registered.get(id(obj))
        if name is not None:
            return importlib.import_module, (name,)
        if isinstance(obj, torch.Tensor):  # mapped from a file: sent as the file (mapped.reference)
            reduced = mapped.reference(obj)
            if reduced is not None:
                return reduced
        return super().reducer_override(obj)


def _registered_non_modules() -> dict[int, str]:
    return {id(m): n for n, m in list(sys.modules.items()) if m is not None and type(m) is not types.ModuleType}


def pack(obj, what: str = "launch()") -> bytes:
    """``obj`` as bytes another process can load, by value where the notebook defined it."""
    try:
        payload = _dumps(obj)
    except Exception as err:  # noqa: BLE001 - any pickling failure is the user's object
        raise Unsendable(_unsendable(obj, what, err)) from None
    if len(payload) > LARGE_BYTES:
        print(f"kagglekit: {what} sends {len(payload) / 2**30:.1f} GiB to each process "
              f"({_largest(obj)}); each keeps its own copy. Keep large data in a unit cached with "
              "mapped=True (its file travels instead), or read it inside the launched function",
              file=sys.stderr, flush=True)
    return payload


def _dumps(obj) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=5).dump(obj)
    return buffer.getvalue()


def unpack(payload: bytes):
    return cloudpickle.loads(payload)


def _unsendable(obj, what: str, err: Exception) -> str:
    name, inner, kind = _culprit(obj, "the function") or ("the function", err, type(obj).__name__)
    return (f"{what} cannot send {name} (a {kind}) to its processes ({type(inner).__name__}: "
            f"{str(inner).splitlines()[0] if str(inner) else 'not picklable'}). Create it inside "
            "the launched function, or pass what rebuilds it (a path, a config) instead")


def _culprit(obj, name: str, depth: int = 0):
    """(name, error, type name) of the innermost named part of ``obj`` that cannot be pickled."""
    try:
        cloudpickle.dumps(obj, protocol=5)
        return None
    except Exception as err:  # noqa: BLE001
        found = (name, err, type(obj).__name__)
    if depth < 4:
        for part_name, part in _parts(obj, name):
            inner = _culprit(part, part_name, depth + 1)
            if inner is not None:
                return inner
    return found


def _parts(obj, name: str):
    """The named things ``obj`` carries: a partial's arguments, a function's closure and the
    notebook globals it reads, a method's object, containers' items, an object's attributes."""
    import functools
    import types
    if isinstance(obj, functools.partial):
        yield from ((f"argument {i + 1} of {name}", a) for i, a in enumerate(obj.args))
        yield from ((f"{k}= of {name}", v) for k, v in obj.keywords.items())
        yield obj.func.__name__ if hasattr(obj.func, "__name__") else name, obj.func
    elif isinstance(obj, types.FunctionType):
        cells = zip(obj.__code__.co_freevars, obj.__closure__ or ())
        yield from ((f"`{var}`", cell.cell_contents) for var, cell in cells if _filled(cell))
        yield from ((f"`{n}`", obj.__globals__[n]) for n in _names(obj.__code__)
                    if n in obj.__globals__ and not isinstance(obj.__globals__[n], types.ModuleType))
    elif isinstance(obj, types.MethodType):
        yield f"{name}'s object", obj.__self__
    elif isinstance(obj, (list, tuple)):
        yield from ((f"{name}[{i}]", v) for i, v in enumerate(obj))
    elif isinstance(obj, dict):
        yield from ((f"{name}[{k!r}]", v) for k, v in obj.items())
    elif hasattr(obj, "__dict__"):
        yield from ((f"{name}.{k}", v) for k, v in vars(obj).items())


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
        return True
    except ValueError:
        return False


def _names(code) -> set[str]:
    """The global names a code object and the functions nested in it read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def _largest(obj, name: str = "it", depth: int = 0) -> str:
    """The part that makes most of ``obj``'s payload, followed down while one part does."""
    sizes = [(len(_dumps(part)), part_name, part)
             for part_name, part in _parts(obj, name) if _picklable(part)]
    if not sizes:
        return f"the largest: {name}"
    size, part_name, part = max(sizes, key=lambda s: s[0])
    if depth < 3 and size > LARGE_BYTES / 2:
        return _largest(part, part_name, depth + 1)
    return f"the largest: {part_name}, {size / 2**30:.1f} GiB"


def _picklable(obj) -> bool:
    try:
        cloudpickle.dumps(obj, protocol=5)
        return True
    except Exception:  # noqa: BLE001
        return False
