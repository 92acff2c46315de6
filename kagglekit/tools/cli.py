"""Command line: ``python -m kagglekit.tools.cli COMMAND [NB ...]`` (``--help`` lists the commands)."""
from __future__ import annotations

import argparse
import json
import sys
import time
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


def _kernels(names: list[str]) -> list[tuple[str, Path]]:
    """(kernel name, notebook) for each name: a notebook's, or a variant's in kernel-metadata/
    (another kernel of a notebook, e.g. gnn_elliptic: other data, other parameters)."""
    found = []
    for name in names:
        variant = Path("kernel-metadata") / f"{name}.json"
        if not (NOTEBOOKS / f"{Path(name).stem}.ipynb").exists() and variant.exists():
            notebook = json.loads(variant.read_text()).get("notebook", name)
            found.append((name, NOTEBOOKS / f"{notebook}.ipynb"))
        else:
            found.extend((nb.stem, nb) for nb in _notebooks([name]))
    return found or [(nb.stem, nb) for nb in _notebooks([])]


def cmd_run(args) -> int:
    """Every notebook's parameters are checked before the first kernel starts; each run
    goes to its configuration's folder; a table of headline results at the end."""
    from ..machine import ascard
    from ..run.params import ParameterError
    from .notebook_runner import parse_overrides, run_folder, run_notebook
    try:
        ascard.card()  # AS=t4 on a machine without a CUDA card: one line, before any kernel
        kernels = _kernels(args.notebooks)
        params = {name: {**(_kaggle_parameters(name) if args.kaggle else {}),
                         **parse_overrides(args.param)} for name, _ in kernels}
        for name, nb in kernels:  # a typo fails here, before any kernel
            run_folder(nb, params[name], args.output)
    except (ValueError, ParameterError, ascard.AsCardError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows = [_run_one(nb, params[name], args.output, run_notebook) for name, nb in kernels]
    if len(rows) > 1:
        print("\n" + _text_table(rows))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


def _kaggle_parameters(name: str) -> dict:
    """The parameters notebook ``name`` runs with on Kaggle (kernel-metadata/<name>.json)."""
    from .publish import metadata
    return metadata.load(Path("kernel-metadata") / f"{name}.json").get("parameters", {})


def _run_one(nb: Path, params: dict, output_root: str, run_notebook) -> dict:
    from .notebook_runner import one_line, run_folder
    from .runfolders import headline_text
    folder = run_folder(nb, params, output_root)
    print(f"== {nb.stem}: running with {params or 'its defaults'} -> {folder}/", flush=True)
    started = time.monotonic()
    try:
        run_notebook(nb, params, output_root=output_root)
        status = "ok"
    except Exception as err:  # noqa: BLE001 - one line here; the traceback is in error.log
        status = "failed"
        print(f"== {nb.stem}: FAILED: {one_line(err)}\n   full traceback: {folder}/error.log",
              file=sys.stderr, flush=True)
    metrics = folder / "metrics.json"
    summary = json.loads(metrics.read_text()).get("summary", []) if metrics.exists() else []
    row = {"notebook": nb.stem, "status": status, "headline": headline_text(summary),
           "wall_s": round(time.monotonic() - started, 1), "folder": str(folder)}
    if status == "ok":
        print(f"== {nb.stem}: done in {row['wall_s']} s -> {folder}/")
        for line in row["headline"].split("; "):
            print(f"   {line}")
    return row


def _latest(folder: Path) -> Path:
    """A notebook's last successful run folder (``latest``), else the folder itself."""
    return folder / "latest" if (folder / "latest").exists() else folder


def _text_table(rows: list[dict]) -> str:
    from ..machine.display import frame
    return frame(rows).to_string(index=False)


def cmd_runs(args) -> int:
    """Every local run and downloaded Kaggle version: status, CV, public score, parameters."""
    from .runtable import text
    print(text(Path(args.output)) or f"no runs under {args.output}/ yet (make run)")
    return 0


def cmd_view(args) -> int:
    from .view import view
    return view(_notebooks(args.notebooks), Path(args.runs), _latest)


def _names(args) -> list[str]:
    return [name for name, _ in _kernels(args.notebooks)]


def cmd_build(args) -> int:
    from .publish import commands
    return commands.build_all(_names(args))


def cmd_push(args) -> int:
    from .publish import commands
    if not args.notebooks and not args.all:
        known = ", ".join(p.stem for p in sorted(NOTEBOOKS.glob("*.ipynb")))
        print(f"error: name the notebook to push (make push NB=<name>; one of {known}), or ALL=1 "
              "to push every notebook: each push starts a GPU session of your weekly quota.",
              file=sys.stderr)
        return 2
    return commands.push_all(_names(args), args.accelerator, sessions=args.sessions)


def cmd_status(args) -> int:
    from .publish import commands
    return commands.status_all(_names(args), args.wait, args.timeout)


def cmd_logs(args) -> int:
    from .publish import commands
    return commands.logs_all(_names(args))


def cmd_output(args) -> int:
    from .publish import commands
    return commands.output_all(_names(args), args.output, args.force)


def _one_competition_kernel(args, what: str) -> str | None:
    names = _names(args) if args.notebooks else []
    if len(names) != 1:
        print(f"error: name the one competition notebook to {what} (make {what} "
              "NB=segmentation_3d, or NB=timeseries_store_sales)", file=sys.stderr)
        return None
    return names[0]


def cmd_submit(args) -> int:
    from .publish import submit
    name = _one_competition_kernel(args, "submit")
    return submit.submit(name, args.message, args.output) if name else 2


def cmd_score(args) -> int:
    from .publish import submit
    name = _one_competition_kernel(args, "score")
    return submit.score(name, args.output) if name else 2


def cmd_data(args) -> int:
    from .publish import commands
    return commands.data_all(_names(args), args.force)


def cmd_quota(args) -> int:
    from .publish import commands
    return commands.quota()


def cmd_pull(args) -> int:
    from .publish import commands
    from .publish.pull import PullRefused, pull
    for name in _names(args):
        kernel, _ = commands.kernel_of(name)
        try:
            lines = pull(name, kernel, NOTEBOOKS, commands.METADATA_DIR, force=args.force)
        except PullRefused as err:
            print(f"error: {name}: {err}", file=sys.stderr)
            return 2
        print("\n".join([f"pulled {kernel}:"] + [f"  {line}" for line in lines]))
    return 0


def cmd_compare(args) -> int:
    from .publish.compare import compare_notebook
    return 0 if all([compare_notebook(name, Path(args.runs)) for name in _names(args)]) else 1


def _slug(name: str) -> str:
    from .publish import metadata
    return metadata.load(Path("kernel-metadata") / f"{name}.json")["slug"]


def cmd_drift(args) -> int:
    from .drift import report
    return 1 if any([report(_slug(n), Path(args.runs), Path(args.image), args.rewrite) for n in _names(args)]) else 0


def cmd_results(args) -> int:
    from .figuretable import append_fetched
    lines = [line for n in _names(args) for line in append_fetched(Path(args.output), _slug(n), Path(args.results))]
    print("\n".join(lines))
    return 0


def cmd_publish(args) -> int:
    from .publish.weights import publish
    names = _names(args) if args.notebooks else []
    if len(names) != 1:
        print("error: name the one kernel whose weights to publish (make publish NB=segmentation_3d)", file=sys.stderr)
        return 2
    print(publish(names[0], args.run, args.optimizer, args.message))
    return 0


def cmd_sandbox(args) -> int:
    from .sandbox import sandbox
    return sandbox(_names(args), cap=args.cap, keep=Path(args.keep) if args.keep else None,
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
    for name, func, text in (("build", cmd_build, "render notebooks for Kaggle into build/kaggle/"),
                             ("push", cmd_push, "build, validate and push as Kaggle kernels"),
                             ("status", cmd_status, "the Kaggle run's status (non-zero on ERROR)"),
                             ("logs", cmd_logs, "the log of the Kaggle run (its traceback on ERROR)"),
                             ("output", cmd_output, "download a finished Kaggle run's outputs"),
                             ("pull", cmd_pull, "bring a notebook edited on Kaggle back into notebooks/"),
                             ("quota", cmd_quota, "GPU hours used and left this week"),
                             ("data", cmd_data, "download the data a kernel attaches into data/<slug>/"),
                             ("submit", cmd_submit, "submit a finished competition kernel's submission"),
                             ("score", cmd_score, "a competition kernel's submissions and their scores"),
                             ("compare", cmd_compare, "a local run against the Kaggle run of the same configuration"),
                             ("drift", cmd_drift, "the packages the Kaggle run had against the sandbox's pins"),
                             ("results", cmd_results, "fetched gpu_figures tables into benchmarks/RESULTS.md"),
                             ("publish", cmd_publish, "a finished run's weights as a dataset for inference kernels")):
        p = sub.add_parser(name, help=text)
        p.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
        p.set_defaults(func=func)
        if name == "push":
            p.add_argument("--accelerator", default="NvidiaTeslaT4")
            p.add_argument("--all", action="store_true", help="push every notebook (ALL=1)")
            p.add_argument("--sessions", type=int, default=2,
                           help="GPU sessions of these kernels running at once (SESSIONS=; Kaggle's ~2)")
        if name == "status":
            p.add_argument("--wait", action="store_true", help="poll until done, with back-off")
            p.add_argument("--timeout", type=float, default=12 * 3600)
        if name in ("output", "submit", "score", "results"):
            p.add_argument("--output", default="runs/kaggle")
        if name == "submit":
            p.add_argument("-m", "--message", default="kagglekit submission", help="submission description")
        if name in ("output", "pull", "data"):
            p.add_argument("--force", action="store_true",
                           help="output: download while RUNNING; pull: overwrite local edits; "
                                "data: download again")
        if name == "publish":
            p.add_argument("--run", default="", help="the run folder (default: the newest finished one)")
            p.add_argument("--optimizer", action="store_true", help="keep the optimizer's state too")
            p.add_argument("-m", "--message", default="", help="the dataset version's notes")
        if name == "results":
            p.add_argument("--results", default="benchmarks/RESULTS.md", help="the file the tables go to")
        if name in ("compare", "drift"):
            p.add_argument("--runs", default="runs")
        if name == "drift":
            p.add_argument("--rewrite", action="store_true", help="put the run's versions into the pins")
            p.add_argument("--image", default="sandbox/kaggle-image.txt")
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except Exception as err:  # the CLI's errors are messages for a person, not tracebacks
        from ..run.params import ParameterError
        from .figuretable import FiguresError
        from .publish import build, credentials, kaggle_cli, metadata, upload, weights
        known = (metadata.MetadataError, credentials.CredentialsError, kaggle_cli.KaggleError,
                 build.BuildError, ParameterError, FiguresError, weights.PublishError, upload.UploadRefused)
        if isinstance(err, known):
            print(f"error: {err}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
