"""The one key of a unit of work, and what it is made of.

A unit (a fold, a model's training, a cached result, a search) is named by one key: 16 hex
digits of the sha256 of its config without run control (canonical JSON), a fingerprint of its
data (content hashes of tensors, arrays, PyG graphs, files and folders) and its code's version
(the kit's version plus the source of the functions and classes given and of the notebook's
functions and classes they reach) and, for a unit, the notebook's top-level statements that made
the values its code reads (``state.reads.trace``). The unit's cache entry, checkpoint folder and study carry it
(``run.unit``). Checkpoints of a fit outside any unit are keyed by the same derivation over
their config, data and model (``identity.Identity``).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
from pathlib import Path

import numpy as np
import torch

KEY_DIGITS = 16
# Run control that says how a session goes about a unit, never what it produces: a result
# stored under other values of these is still this unit's result.
SESSION_ONLY = frozenset({"force_retrain", "time_budget_s", "save_every_min", "processes",
                          "folds_per_version"})


def derive(*parts) -> str:
    """``KEY_DIGITS`` hex digits of the sha256 of ``parts`` as canonical JSON."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_DIGITS]


def without(config: dict | None, run_control) -> dict:
    """``config`` as canonical JSON values, its ``run_control`` keys left out."""
    return json.loads(json.dumps({k: v for k, v in (config or {}).items() if k not in run_control},
                                 sort_keys=True, default=str))


def shaping(config: dict | None, run_control) -> dict:
    """The run-control values of ``config`` that shape a unit's result (``epochs``: a longer
    training is another result under the same key; ``SESSION_ONLY`` ones are not)."""
    return without({k: v for k, v in (config or {}).items() if k in run_control}, SESSION_ONLY)


def key(config: dict | None, data=None, code=None, run_control=(), content: str | None = None,
        statements=None) -> str:
    """The unit key of (config without ``run_control``, data, code); ``content``: the data's
    fingerprint when already known (the folds of one data set); ``statements``: the notebook's
    top-level statements that made the values the code reads (a unit's: ``state.reads.trace``)."""
    if content is None:
        content = fingerprint(data) if data is not None else ""
    parts = [without(config, run_control), content, code_digest(code)]
    return derive(*parts, list(statements)) if statements is not None else derive(*parts)


def code_digest(code) -> str:
    """``KEY_DIGITS`` hex digits of the sha256 of ``code_version(code)``: what a key holds of the
    code (a unit's record in metrics.json carries it, so its key can be derived again)."""
    return hashlib.sha256(code_version(code).encode()).hexdigest()[:KEY_DIGITS]


def _hash_tensor(t: torch.Tensor, h) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def _hash_file(path: Path, h, full_below: int = 4 * 2**20) -> None:
    """Whole content below 4 MB; above, size plus 64 KB samples at 16 offsets: a competition's
    1,600 volumes of tens of MB each are fingerprinted in seconds, not minutes (a new version of
    a file changes its size or the bytes sampled; a mount never changes under a kernel)."""
    size = path.stat().st_size
    h.update(f"{path.name}:{size}".encode())
    with open(path, "rb") as f:
        if size <= full_below:
            while block := f.read(1 << 20):
                h.update(block)
            return
        for i in range(16):
            f.seek(size * i // 16)
            h.update(f.read(1 << 16))


def _feed(obj, h) -> None:
    if isinstance(obj, torch.Tensor):
        _hash_tensor(obj, h)
    elif isinstance(obj, np.ndarray):
        _hash_tensor(torch.from_numpy(np.ascontiguousarray(obj)), h)
    elif isinstance(obj, Path):
        paths = sorted(p for p in obj.rglob("*") if p.is_file()) if obj.is_dir() else [obj]
        for p in paths:
            _hash_file(p, h)
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(str(k).encode())
            _feed(obj[k], h)
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__}{len(obj)}".encode())
        for item in obj:
            _feed(item, h)
    elif hasattr(obj, "tensors"):  # TensorDataset
        _feed(list(obj.tensors), h)
    elif hasattr(obj, "dataset") and hasattr(obj, "indices"):  # Subset
        _feed([obj.dataset, list(obj.indices)], h)
    elif type(obj).__module__.startswith("torch_geometric") and hasattr(obj, "to_dict"):
        _feed(obj.to_dict(), h)  # a PyG graph: every node, edge and mask tensor
    else:
        text = json.dumps(obj, sort_keys=True, default=repr)
        if " at 0x" in text:  # a repr with a memory address: different every run
            raise TypeError(f"cannot fingerprint a {type(obj).__name__} by its content; pass "
                            "its tensors, arrays, files or folder instead")
        h.update(text.encode())


def fingerprint(data) -> str:
    """Content hash of tensors, arrays, TensorDatasets and Subsets of them, PyG graphs,
    files and folders, nested freely in lists, tuples and dicts. Other objects raise
    TypeError (hashing their repr would change every run)."""
    h = hashlib.sha256()
    _feed(data, h)
    return h.hexdigest()


def code_version(code) -> str:
    """The kit's version plus ``code``: a string as given, or the source of each function, class
    or module given (one, or a list) and of every function and class of its own module that it
    reaches (``reached``): a unit named by its training function changes key when a model class or
    a helper that function calls is edited, without a hand-kept list that forgets one."""
    from ..machine.version import __version__
    if code is None:
        text = ""
    elif isinstance(code, str):
        text = code
    else:
        roots = list(code) if isinstance(code, (list, tuple)) else [code]
        text = "\n".join(c if isinstance(c, str) else source_of(c) for c in reached(roots))
    return f"kagglekit {__version__}\n{text}"


def reached(roots: list) -> list:
    """``roots`` and every function and class of a root's module (a notebook's) that they refer
    to, directly or through one another, each once, in the order found: the global names of
    their code (methods, lambdas and comprehensions inside included), their closures and their
    defaults. Library code is not followed: its version is pinned, the kit's is in the key."""
    found, queue = {}, [code_of(r) or r for r in roots]
    while queue:
        obj = queue.pop(0)
        if id(obj) not in found:
            found[id(obj)] = obj
            queue += [r for r in _refers_to(obj) if getattr(r, "__module__", None) == obj.__module__]
    return list(found.values())


def code_of(value):
    """The function or class behind ``value`` (a decorated function's own: ``torch.no_grad``,
    ``functools.cache``; a ``functools.partial``'s), else None."""
    if isinstance(value, functools.partial):
        return code_of(value.func)
    wrapped = getattr(value, "__wrapped__", None)
    if inspect.isfunction(wrapped) or inspect.isfunction(value):
        return inspect.unwrap(value)
    return value if inspect.isclass(value) else None


def _refers_to(obj) -> list:
    if inspect.isclass(obj):
        members = [getattr(m, "__func__", getattr(m, "fget", m)) for m in vars(obj).values()]
        return [r for f in map(code_of, members) if inspect.isfunction(f) for r in _refers_to(f)]
    if not inspect.isfunction(obj):
        return []
    names = _global_names(obj.__code__)
    values = [obj.__globals__[n] for n in names if n in obj.__globals__] + closed_over(obj)
    values += list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
    return [code for code in map(code_of, values) if code is not None]


def closed_over(function) -> list:
    values = []
    for cell in function.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # a cell not assigned yet (a name defined later in the enclosing function)
            pass
    return values


def _global_names(code) -> list[str]:
    """The names ``code`` and the code nested in it (lambdas, comprehensions, inner functions)
    look up, in order (attribute names too: a global of that name is included, to be safe)."""
    nested = [c for c in code.co_consts if inspect.iscode(c)]
    return list(dict.fromkeys([*code.co_names, *(n for c in nested for n in _global_names(c))]))


def source_of(obj) -> str:
    """``inspect.getsource``; for a class defined in a notebook (whose source inspect
    cannot find) the sources of its methods, which IPython does keep."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        if not inspect.isclass(obj):
            raise
        methods = [f for f in vars(obj).values() if inspect.isfunction(f)]
        return f"class {obj.__qualname__}{obj.__bases__}\n" + "\n".join(map(inspect.getsource, methods))
