"""The typed face: ``kagglekit/__init__.pyi`` written from the lazy tables of ``kagglekit/__init__.py``.

``kk.<name>`` resolves at run time through ``__getattr__``, which a type checker reads as ``Any``;
the stub names each module and export by its real place, so mypy checks a notebook's
``kk.fit(..., wrong_keyword=1)`` and an editor follows ``kk.images.read_competition`` to its source.
Run ``python -m kagglekit.tools.facestub`` after adding a name to the tables (tests/test_face.py
fails until then).
"""
from __future__ import annotations

import importlib
from pathlib import Path

# the run-time tables, read past the stub (which shows mypy the face, not its tables)
_FACE = vars(importlib.import_module("kagglekit"))
STUB = Path(_FACE["__file__"]).with_suffix(".pyi")


def render() -> str:
    """The stub's text: one import per face name, sorted by where it lives."""
    submodules, exports = _FACE["_SUBMODULES"], _FACE["_EXPORTS"]
    lines = ['"""The typed face of kagglekit (written by kagglekit/tools/facestub.py; do not edit)."""',
             "from .machine.version import __version__ as __version__", ""]
    for face, where in sorted(submodules.items(), key=lambda kv: (kv[1], kv[0])):
        package, module = where.rsplit(".", 1) if "." in where else ("", where)
        lines.append(f"from .{package} import {module} as {face}")
    lines.append("")
    for name, owner in sorted(exports.items(), key=lambda kv: (submodules[kv[1]], kv[0])):
        lines.append(f"from .{submodules[owner]} import {name} as {name}")
    names = sorted(set(submodules) | set(exports) | {"__version__"})
    lines += ["", "__all__ = ["] + [f'    "{name}",' for name in names] + ["]", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    STUB.write_text(render())
    print(f"wrote {STUB}")
