"""Command line: ``python -m kagglekit.tools.cli COMMAND [NB ...]`` (``--help`` lists the commands)."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from .kernelnames import kaggle_parameters, kernels as find_kernels, names, notebooks as find_notebooks


def cmd_run(args) -> int:
    """Every notebook's parameters are checked before the first kernel starts; each run
    goes to its configuration's folder; a table of headline results at the end."""
    from ..machine import ascard
    from ..run.params import ParameterError
    from .notebook_runner import parse_overrides, run_folder, run_notebook
    name, kernels = "", []
    try:
        ascard.card()  # AS=t4 on a machine without a CUDA card: one line, before any kernel
        if args.param and not args.notebooks:  # every notebook would run with them, the first one failing
            raise ValueError(f"P={' '.join(args.param)} without NB would run every notebook with these parameters: "
                             "name the notebook, e.g. make run NB=tabular P=...")
        kernels = find_kernels(args.notebooks)
        params = {name: {**(kaggle_parameters(name) if args.kaggle else {}),
                         **parse_overrides(args.param)} for name, _ in kernels}
        for name, nb in kernels:  # a typo fails here, before any kernel
            run_folder(nb, params[name], args.output)
    except (ValueError, ParameterError, ascard.AsCardError) as err:
        print(f"error: {name + ': ' if len(kernels) > 1 else ''}{err}", file=sys.stderr)  # which one, of several
        return 2
    rows = [_run_one(nb, params[name], args.output, run_notebook) for name, nb in kernels]
    if len(rows) > 1:
        print("\n" + _text_table(rows))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


def _run_one(nb: Path, params: dict, output_root: str, run_notebook) -> dict:
    from .notebook_runner import one_line, run_folder
    from .runfolders import headline_text
    folder = run_folder(nb, params, output_root)
    print(f"== {nb.stem}: running with {params or 'its defaults'} -> {folder}/", flush=True)
    started = time.monotonic()
    try:
        run_notebook(nb, params, output_root=output_root)
        status = "ok"
    except SystemExit:  # SIGTERM (notebook_runner.Terminated): the kernel is down, the status says killed
        print(f"== {nb.stem}: killed by SIGTERM -> {folder}/ (status: killed)", file=sys.stderr, flush=True)
        raise
    except KeyboardInterrupt:  # Ctrl-C reached the kernel too: its fit saved a checkpoint and stopped
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # the kernel's task, never awaited: no dump
        print(f"== {nb.stem}: stopped by Ctrl-C -> {folder}/: a fit saves a checkpoint as it stops, so the same "
              f"make run resumes it", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except Exception as err:  # noqa: BLE001 - one line here; the traceback is in error.log
        status = "failed"
        print(f"== {nb.stem}: FAILED: {one_line(err)}\n   full traceback: {folder}/error.log",
              file=sys.stderr, flush=True)
    metrics = json.loads((folder / "metrics.json").read_text()) if (folder / "metrics.json").exists() else {}
    row = {"notebook": nb.stem, "status": status, "headline": headline_text(metrics.get("summary", [])),
           "judged": _judged(metrics.get("summary", [])), "wall_s": round(time.monotonic() - started, 1),
           "folder": str(folder)}
    if status == "ok":
        print(f"== {nb.stem}: done in {row['wall_s']} s -> {folder}/")
        for line in str(row["headline"]).split("; "):
            print(f"   {line}")
    for note in metrics.get("notes", []):  # what it dropped or skipped on the way, beside the headline
        print(f"   note: {note}")
    return row


def _latest(folder: Path) -> Path:
    """A notebook's last successful run folder (``latest``), else the folder itself."""
    return folder / "latest" if (folder / "latest").exists() else folder


def _text_table(rows: list[dict]) -> str:
    """The closing table of ``make run``: each notebook's verdicts counted (its headlines were
    printed as it finished)."""
    from ..machine.display import text_table
    return text_table([{"notebook": r["notebook"], "status": r["status"], "judged": r["judged"],
                        "seconds": r["wall_s"], "folder": r["folder"]} for r in rows])


def _judged(summary: list[dict]) -> str:
    """'3 pass', '1 FAIL, 2 pass' or '-': the headlines judged against their baselines."""
    verdicts = [h.get("passed") for h in summary]
    counts = [f"{verdicts.count(verdict)} {word}" for verdict, word in ((False, "FAIL"), (True, "pass"))
              if verdict in verdicts]
    return ", ".join(counts) or "-"


def cmd_runs(args) -> int:
    """Every local run and downloaded Kaggle version: status, CV, public score, parameters."""
    from .runtable import text
    print(text(Path(args.output)) or f"no runs under {args.output}/ yet (make run)")
    return 0


def cmd_view(args) -> int:
    from .view import view
    return view(find_notebooks(args.notebooks), Path(args.runs), _latest)


def cmd_sandbox(args) -> int:
    from .sandbox import sandbox
    return sandbox(names(args), cap=args.cap, keep=Path(args.keep) if args.keep else None,
                   jobs=args.jobs, data=Path(args.data) if args.data else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kagglekit")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute notebooks locally with papermill")
    run.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    run.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("--output", default="runs", help="output root (default: runs/)")
    run.add_argument("--kaggle", action="store_true",
                     help="with the parameters the notebook runs with on Kaggle (KAGGLE=1)")
    run.set_defaults(func=cmd_run)
    runs = sub.add_parser("runs", help="list local runs with their status and headline results")
    runs.add_argument("--output", default="runs", help="output root (default: runs/)")
    runs.set_defaults(func=cmd_runs)
    view = sub.add_parser("view", help="render executed notebooks to HTML (and a screenshot)")
    view.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    view.add_argument("--runs", default="runs", help="where the executed notebooks are")
    view.set_defaults(func=cmd_view)
    from .publish import upload
    upload.add_command(sub)
    box = sub.add_parser("sandbox", help="run what push sends in a Kaggle-like sandbox, 3 versions")
    box.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    box.add_argument("--cap", type=int, default=1, help="KAGGLEKIT_WORK_CAP: steps per fit")
    box.add_argument("--keep", default="", help="keep the versions' folders here")
    box.add_argument("--jobs", type=int, default=2, help="notebooks run side by side (default 2)")
    box.add_argument("--data", default="", help="a copy of the real data (make data) to mount "
                     "where Kaggle mounts the kernel's competition or dataset (DATA=)")
    box.set_defaults(func=cmd_sandbox)
    from .publish import subcommands
    subcommands.add(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except Exception as err:  # the CLI's errors are messages for a person, not tracebacks
        from ..run.params import ParameterError
        from .figuretable import FiguresError
        from .publish import build, credentials, kaggle_cli, metadata, models, upload, weights
        known = (metadata.MetadataError, credentials.CredentialsError, kaggle_cli.KaggleError,
                 build.BuildError, ParameterError, FiguresError, weights.PublishError, upload.UploadRefused,
                 models.ModelPublishError)
        if isinstance(err, known):
            print(f"error: {err}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
