"""`make gpu-check`: on a lent GPU, in one call, every check only a GPU can make, with a report.

    python3 benchmarks/gpu_check.py --bundle .gpu-bundle --out <folder>   # on the device
    python3 benchmarks/gpu_check.py --bundle .gpu-bundle --dry-run        # here, without CUDA

The lent machine's python3 has a CUDA torch, transformers and PyG but no network and not the
rest (`make gpu-bundle` brings it as wheels). This installs the bundle into a temporary target
(`--no-index`), records the image's versions and their drift from the project's pins, then runs
each check in a process of its own, most fault-prone first, with its own time limit; one failing
never hides the rest, all within BUDGET_S (480 s: a check the visit has no time left for is named,
not lost). The report (`report.json`) and the dated block for benchmarks/history/ (`results.md`)
go to `--out`.

The dry run, on a machine without CUDA, installs the bundle into a fresh target beside the
project's CPU torch, imports everything every notebook imports, runs one notebook's smoke on the
CPU, and exits 0 saying "no CUDA". No CPU torch for Python 3.12 comes from the registries, so it
runs on this interpreter: the wheels built for another (cp312) are checked by their tags instead.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 480  # a lent card's 15 minutes hold its start, the bundle's install, this and one rerun
# In the order a visit must not lose: the figures first (precision per model, CUDA graphs, the
# optimisations no other check measures, the two ranks' restart), then what guards a run (resume,
# OOM, the GPU tests, LoRA's fp16, the batch finder), the notebooks' smoke last with what is left.
# Limits from the lent cards' own times (H100 2026-11-27, H200 2026-11-29: precision 33-53 s, graphs
# 21 s, nccl 20-52 s, resume 30-49 s, oom 31 s, gpu_tests 17-34 s, lora 38 s; optimisations never
# ran on a card: its own deadline names what it had no time for); they sum to BUDGET_S.
CHECKS = (("precision", 55), ("graphs", 30), ("optimisations", 60), ("nccl", 55), ("resume", 55), ("oom", 40),
          ("gpu_tests", 30), ("lora", 50), ("batchsize", 35), ("notebooks", 70))
EXTRAS = (("plumbing", 45), ("timm_backbone", 120))  # passed on a card already: --only names them
CANNOT = ("two NCCL ranks and cuda:1 (one card)", "the T4's own speed and numerics",
          "PCIe between two cards", "Kaggle's 4 vCPUs and 29 GB host memory")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_checks import seedtable, setup  # noqa: E402 (this folder's)


def run_check(name: str, limit_s: int, env: dict) -> dict:
    """One check in its own process: its verdict line, its time, its output's tail on failure."""
    started = time.monotonic()
    try:
        env = {**(env or os.environ), "KAGGLEKIT_CHECK_DEADLINE_S": str(max(5, limit_s - 15))}  # its own, inside
        done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_checks" / f"{name}.py")],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=limit_s)
        out, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as err:  # its output so far comes as bytes, whatever text= said
        out, code = "".join(_text(b) for b in (err.stdout, err.stderr)), None
    ended = f"over {limit_s} s" if code is None else f"exit {code}"
    verdict = next((json.loads(line[7:]) for line in reversed(out.splitlines()) if line.startswith("RESULT ")),
                   None)
    if verdict is None:  # killed: the parts it reported on the way (a notebook's row each)
        verdict = {"ok": False, "error": f"no verdict ({ended})",
                   "parts": [json.loads(line[5:]) for line in out.splitlines() if line.startswith("PART ")]}
    verdict.update(check=name, seconds=round(time.monotonic() - started, 1))
    if not verdict["ok"]:
        verdict["tail"] = out.strip().splitlines()[-12:]
    return verdict


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def block(found: dict, results: list[dict]) -> str:
    """The dated block for RESULTS.md: the device, the versions, one line per check."""
    v = found["versions"]
    lines = [f"### gpu-check {datetime.date.today().isoformat()} on {v.get('device')} "
             f"(driver {v.get('driver')}, torch {v.get('torch')}, CUDA {v.get('cuda')}, "
             f"transformers {v.get('transformers')}, torch-geometric {v.get('torch_geometric')})", "",
             "| check | verdict | seconds | figures |", "| --- | --- | --- | --- |"]
    for r in results:
        figures = {k: val for k, val in r.items() if k not in ("check", "ok", "seconds", "tail")}
        lines.append(f"| {r['check']} | {'pass' if r['ok'] else 'FAIL'} | {r['seconds']} | "
                     f"{json.dumps(figures, default=str)[:600]} |")
    drift = "; ".join(f"{k} {a} (pinned {b})" for k, (a, b) in found["drift"].items()) or "none"
    lines += ["", "The guide's optimisations on this card (the seeds' rows):", "", *seedtable.table(results)]
    lines += ["", f"Drift from the project's pins: {drift}.",
              f"What one card cannot check: {'; '.join(CANNOT)}.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default=str(REPO / ".gpu-bundle"))
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true", help="no CUDA here: install, import, one smoke")
    ap.add_argument("--only", default="", help="comma-separated checks (default: all)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-site-") as target:
        try:
            return check(args, out, Path(target))
        except setup.BundleError as err:  # the one line that says what to run, not a traceback
            print(f"gpu-check: {err}", file=sys.stderr)
            return 2


def check(args, out: Path, target: Path) -> int:
    installed = setup.install(Path(args.bundle), target, dry_run=args.dry_run)
    env = setup.child_env(target)
    found = {"bundle": installed, **setup.versions(env)}
    wanted = [c for c in CHECKS + EXTRAS if (c in CHECKS and not args.only) or c[0] in args.only.split(",")]
    found["plan"] = dict(wanted)
    print(f"gpu-check plan: {', '.join(f'{name} {limit} s' for name, limit in wanted)}: "
          f"{sum(limit for _, limit in wanted)} s of the visit's {BUDGET_S}", flush=True)
    if args.dry_run or not found["versions"].get("cuda_available"):
        found["dry_run"] = setup.dry_run(env, REPO)
        (out / "report.json").write_text(json.dumps(found, indent=1, default=str) + "\n")
        ok = found["dry_run"]["ok"]
        print(f"gpu-check: no CUDA on this machine: the GPU checks were not run. The bundle installed "
              f"({installed['installed']} wheels, {installed['checked_by_tag']} checked by their tags), "
              f"{found['dry_run']['imports']} modules imported, the {found['dry_run']['notebook']} "
              f"smoke {'ran' if ok else 'FAILED'} ({found['dry_run']['seconds']} s). Report: {out / 'report.json'}")
        return 0 if ok else 1
    results, visit_ends = [], time.monotonic() + BUDGET_S
    for name, limit_s in wanted:
        left = int(visit_ends - time.monotonic())
        if left < 10:  # said, not lost: the next visit runs it first (--only)
            results.append({"check": name, "ok": False, "seconds": 0, "error": f"not run: the visit's {BUDGET_S} s "
                            "were spent"})
            continue
        results.append(run_check(name, min(limit_s, left), env))
        print(f"gpu-check {name}: {'pass' if results[-1]['ok'] else 'FAIL'} ({results[-1]['seconds']} s)", flush=True)
    found["checks"] = results
    (out / "report.json").write_text(json.dumps(found, indent=1, default=str) + "\n")
    (out / "results.md").write_text(block(found, results))
    print(block(found, results))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
