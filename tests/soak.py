"""``make soak``: one training run killed at 20 random points and resumed each time.

The run (tests/jobs/resume_job.py: dropout, accumulation, OneCycle, a loader worker,
a checkpoint after every step) is SIGKILLed a random number of steps in, a random few
milliseconds into the next step or save, or has its loader worker killed instead; then
started again. Its final weights must equal an uninterrupted run's, bitwise. Not part
of ``make test`` (about a minute and a half).
"""
from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

JOB = Path(__file__).parent / "jobs" / "resume_job.py"
ARGS = ["--epochs", "20", "--workers", "1"]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _attempt(ckpt: Path, rng: random.Random) -> str:
    """Start the job, kill it somewhere; the kind of kill, or "finished"."""
    proc = subprocess.Popen([sys.executable, str(JOB), "--ckpt", str(ckpt), "--out", "/dev/null",
                             *ARGS], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wanted, seen = rng.randint(1, 8), 0
    for line in proc.stdout:
        if line.startswith("step "):
            seen += 1
        if seen >= wanted:
            time.sleep(rng.uniform(0, 0.03))  # somewhere in the next step or its save
            workers = _children(proc.pid)
            if workers and rng.random() < 0.25:
                subprocess.run(["kill", "-9", str(workers[0])])
                kind = "loader worker"
            else:
                proc.send_signal(signal.SIGKILL)
                kind = "training process"
            proc.stdout.close()
            proc.wait()
            return kind
    proc.wait()
    return "finished"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="kk-soak-") as tmp:
        tmp = Path(tmp)
        subprocess.run([sys.executable, str(JOB), "--ckpt", str(tmp / "ref"), "--out",
                        str(tmp / "ref.pt"), *ARGS], check=True, capture_output=True)
        kills = []
        while len(kills) < args.kills:
            kind = _attempt(tmp / "ckpt", rng)
            if kind == "finished":
                print(f"the run finished after {len(kills)} kills: fewer than asked", file=sys.stderr)
                return 1
            kills.append(kind)
            print(f"kill {len(kills):2d}: {kind}", flush=True)
        subprocess.run([sys.executable, str(JOB), "--ckpt", str(tmp / "ckpt"), "--out",
                        str(tmp / "out.pt"), *ARGS], check=True, capture_output=True)
        a, b = (torch.load(tmp / n, weights_only=True) for n in ("ref.pt", "out.pt"))
        same = all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    print(f"soak: {len(kills)}/{args.kills} kills ({kills.count('loader worker')} of a loader worker), "
          f"resumed each time; final weights {'bitwise equal to' if same else 'DIFFERENT from'} "
          "an uninterrupted run")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
