"""Command line: ``python -m kagglekit.cli run [NB ...] [-p NAME=VALUE ...]``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NOTEBOOKS = Path("notebooks")


def _notebooks(names: list[str]) -> list[Path]:
    if not names:
        return sorted(NOTEBOOKS.glob("*.ipynb"))
    paths = []
    for name in names:
        path = NOTEBOOKS / f"{Path(name).stem}.ipynb"
        if not path.exists():
            known = ", ".join(p.stem for p in sorted(NOTEBOOKS.glob("*.ipynb")))
            raise SystemExit(f"no notebook named {name!r} in {NOTEBOOKS}/ (known: {known})")
        paths.append(path)
    return paths


def cmd_run(args) -> int:
    from .runner import parse_overrides, run_notebook

    try:
        params = parse_overrides(args.param)
    except ValueError as err:
        raise SystemExit(str(err))
    for nb in _notebooks(args.notebooks):
        print(f"== {nb.stem}: running with {params or 'its defaults'}", flush=True)
        out = run_notebook(nb, params, output_root=args.output)
        metrics = out / "metrics.json"
        summary = json.loads(metrics.read_text()) if metrics.exists() else {}
        keys = [k for k in summary if k not in ("config", "env", "notebook")]
        print(f"== {nb.stem}: done -> {out}/ ({', '.join(keys[:8])})", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kagglekit")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute notebooks locally with papermill")
    run.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    run.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("--output", default="runs", help="output root (default: runs/)")
    run.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
