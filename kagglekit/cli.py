"""Command line: ``python -m kagglekit.cli {run,view,build,push,status,output,compare} [NB ...]``."""
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


def cmd_view(args) -> int:
    """The executed notebook as a person sees it: HTML (nbconvert), and a PNG screenshot
    where a headless Chromium is installed."""
    import shutil
    import subprocess
    for nb in _notebooks(args.notebooks):
        executed = Path(args.runs) / nb.stem / nb.name
        if not executed.exists():
            print(f"{nb.stem}: no executed notebook at {executed} (make run NB={nb.stem})",
                  file=sys.stderr)
            return 1
        html = executed.with_suffix(".html")
        subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--log-level", "ERROR",
                        str(executed), "--output", html.name], check=True)
        print(f"{nb.stem}: {html}")
        browser = next((b for b in ("chromium", "chromium-browser", "google-chrome")
                        if shutil.which(b)), None)
        if browser is None:
            print("  (no headless Chromium here: open the HTML file in a browser)")
            continue
        png = html.with_suffix(".png")
        subprocess.run([browser, "--headless", "--no-sandbox", "--hide-scrollbars",
                        f"--screenshot={png.resolve()}", "--window-size=1200,6000",
                        html.resolve().as_uri()], check=True, capture_output=True)
        print(f"{nb.stem}: {png}")
    return 0


def _names(args) -> list[str]:
    return [p.stem for p in _notebooks(args.notebooks)]


def _kernel(name: str) -> tuple[str, str]:
    """(owner/slug, slug) of notebook ``name`` from its metadata and the credentials."""
    from .publish import credentials, metadata
    meta = metadata.load(Path("kernel-metadata") / f"{name}.json")
    return f"{credentials.username()}/{meta['slug']}", meta["slug"]


def cmd_build(args) -> int:
    from .publish.build import build
    for name in _names(args):
        print(f"built {build(name)}/")
    return 0


def cmd_push(args) -> int:
    from .publish import kaggle_cli
    from .publish.build import build
    folders = [build(name) for name in _names(args)]  # every check passes before any upload
    for folder in folders:
        pushed = kaggle_cli.push(folder, accelerator=args.accelerator)
        print(f"pushed {folder.name}: version {pushed.version} -> {pushed.url}")
    return 0


def cmd_status(args) -> int:
    from .publish import kaggle_cli
    failed = False
    for name in _names(args):
        kernel, _ = _kernel(name)
        st = kaggle_cli.wait(kernel, args.timeout) if args.wait else kaggle_cli.status(kernel)
        print(f"{kernel}: {st.state}" + (f" ({st.failure})" if st.failure else ""))
        failed |= st.state not in ("COMPLETE", "RUNNING", "QUEUED") or (
            args.wait and st.state != "COMPLETE")
    return 1 if failed else 0


def cmd_output(args) -> int:
    from .publish import kaggle_cli
    for name in _names(args):
        kernel, slug = _kernel(name)
        pushed = Path("build/kaggle") / slug / "pushed.json"
        version = json.loads(pushed.read_text()).get("version") if pushed.exists() else None
        dest = Path(args.output) / slug / (f"v{version}" if version else "latest")
        files = kaggle_cli.output(kernel, dest)
        print(f"{kernel}: {len(files)} files -> {dest}/")
    return 0


def cmd_compare(args) -> int:
    from . import report
    failed = False
    for name in _names(args):
        from .publish import metadata
        slug = metadata.load(Path("kernel-metadata") / f"{name}.json")["slug"]
        local = Path(args.runs) / name / "metrics.json"
        remote = sorted((Path(args.runs) / "kaggle" / slug).glob("*/metrics.json"),
                        key=lambda p: p.stat().st_mtime)
        if not local.exists() or not remote:
            print(f"{name}: need {local} (make run NB={name}) and a downloaded Kaggle run "
                  f"(make output NB={name})", file=sys.stderr)
            failed = True
            continue
        result = report.compare(json.loads(local.read_text()), json.loads(remote[-1].read_text()))
        path = report.write(result, remote[-1].parent, f"{name}: local vs Kaggle")
        print(path.read_text())
        failed |= not result["ok"]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kagglekit")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute notebooks locally with papermill")
    run.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    run.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("--output", default="runs", help="output root (default: runs/)")
    run.set_defaults(func=cmd_run)
    view = sub.add_parser("view", help="render executed notebooks to HTML (and a screenshot)")
    view.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    view.add_argument("--runs", default="runs", help="where the executed notebooks are")
    view.set_defaults(func=cmd_view)
    for name, func, text in (("build", cmd_build, "render notebooks for Kaggle into build/kaggle/"),
                             ("push", cmd_push, "build, validate and push as Kaggle kernels"),
                             ("status", cmd_status, "the Kaggle run's status (non-zero on ERROR)"),
                             ("output", cmd_output, "download a Kaggle run's outputs"),
                             ("compare", cmd_compare, "local metrics against the Kaggle run's")):
        p = sub.add_parser(name, help=text)
        p.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
        p.set_defaults(func=func)
        if name == "push":
            p.add_argument("--accelerator", default="NvidiaTeslaT4")
        if name == "status":
            p.add_argument("--wait", action="store_true", help="poll until done, with back-off")
            p.add_argument("--timeout", type=float, default=12 * 3600)
        if name == "output":
            p.add_argument("--output", default="runs/kaggle")
        if name == "compare":
            p.add_argument("--runs", default="runs")
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except Exception as err:  # the CLI's errors are messages for a person, not tracebacks
        from .publish import metadata, credentials, kaggle_cli, build
        known = (metadata.MetadataError, credentials.CredentialsError, kaggle_cli.KaggleError,
                 build.BuildError)
        if isinstance(err, known):
            print(f"error: {err}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
