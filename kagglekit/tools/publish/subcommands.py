"""The Kaggle round trip on the command line: ``make build/push/status/logs/output/pull/quota/data/
submit/score/compare/drift/results/publish`` (each a thin call into this package)."""
from __future__ import annotations

import sys
from pathlib import Path

from ..kernelnames import NOTEBOOKS, names as _names


def cmd_build(args) -> int:
    from . import commands
    return commands.build_all(_names(args))


def cmd_push(args) -> int:
    from . import commands
    if not args.notebooks and not args.all:
        known = ", ".join(p.stem for p in sorted(NOTEBOOKS.glob("*.ipynb")))
        print(f"error: name the notebook to push (make push NB=<name>; one of {known}), or ALL=1 "
              "to push every notebook: each push starts a GPU session of your weekly quota.",
              file=sys.stderr)
        return 2
    return commands.push_all(_names(args), args.accelerator, sessions=args.sessions)


def cmd_status(args) -> int:
    from . import commands
    return commands.status_all(_names(args), args.wait, args.timeout)


def cmd_logs(args) -> int:
    from . import commands
    return commands.logs_all(_names(args))


def cmd_output(args) -> int:
    from . import commands
    return commands.output_all(_names(args), args.output, args.force, args.version)


def _one_competition_kernel(args, what: str) -> str | None:
    names = _names(args) if args.notebooks else []
    if len(names) != 1:
        print(f"error: name the one competition notebook to {what} (make {what} "
              "NB=segmentation_3d, or NB=timeseries_store_sales)", file=sys.stderr)
        return None
    return names[0]


def cmd_submit(args) -> int:
    from . import submit
    name = _one_competition_kernel(args, "submit")
    return submit.submit(name, args.message, args.output) if name else 2


def cmd_score(args) -> int:
    from . import submit
    name = _one_competition_kernel(args, "score")
    return submit.score(name, args.output) if name else 2


def cmd_data(args) -> int:
    from . import commands
    return commands.data_all(_names(args), args.force)


def cmd_quota(args) -> int:
    from . import commands
    return commands.quota()


def cmd_pull(args) -> int:
    from . import commands
    from .pull import PullRefused, pull
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
    from .compare import compare_notebook
    return 0 if all([compare_notebook(name, Path(args.runs)) for name in _names(args)]) else 1


def _slug(name: str) -> str:
    from . import metadata
    return metadata.load(Path("kernel-metadata") / f"{name}.json")["slug"]


def cmd_drift(args) -> int:
    from ..drift import report
    return 1 if any([report(_slug(n), Path(args.runs), Path(args.image), args.rewrite) for n in _names(args)]) else 0


def cmd_results(args) -> int:
    from ..figuretable import append_fetched
    lines = [line for n in _names(args) for line in append_fetched(Path(args.output), _slug(n), Path(args.results))]
    print("\n".join(lines))
    return 0


def cmd_publish(args) -> int:
    from . import models, weights
    publish = models.publish if args.to == "model" else weights.publish
    names = _names(args) if args.notebooks else []
    if len(names) != 1:
        print("error: name the one kernel whose weights to publish (make publish NB=segmentation_3d)", file=sys.stderr)
        return 2
    print(publish(names[0], args.run, args.optimizer, args.message))
    return 0


def add(sub) -> None:
    """Each command as a subcommand of the kit's parser, with its options."""
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
                             ("results", cmd_results, "fetched gpu_figures tables into benchmarks/history/"),
                             ("publish", cmd_publish, "a finished run's weights as a dataset or a Kaggle Model, "
                                                      "for inference kernels")):
        p = sub.add_parser(name, help=text)
        p.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
        p.set_defaults(func=func)
        _options(p, name)


def _options(p, name: str) -> None:
    """Command ``name``'s own options."""
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
    if name == "output":
        p.add_argument("--version", type=int, default=None,
                       help="that version's output (V=; through kagglehub), not the latest")
    if name in ("output", "pull", "data"):
        p.add_argument("--force", action="store_true",
                       help="output: download while RUNNING; pull: overwrite local edits; "
                            "data: download again")
    if name == "publish":
        p.add_argument("--run", default="", help="the run folder (default: the newest finished one)")
        p.add_argument("--optimizer", action="store_true", help="keep the optimizer's state too")
        p.add_argument("-m", "--message", default="", help="the dataset's or model's version notes")
        p.add_argument("--to", choices=("dataset", "model"), default="dataset",
                       help="a private dataset <slug>-weights (default) or a Kaggle Model variation (TO=model)")
    if name == "results":
        p.add_argument("--results", default="benchmarks/history/gpu-figures.md", help="the file the tables go to")
    if name in ("compare", "drift"):
        p.add_argument("--runs", default="runs")
    if name == "drift":
        p.add_argument("--rewrite", action="store_true", help="put the run's versions into the pins")
        p.add_argument("--image", default="sandbox/kaggle-image.txt")
