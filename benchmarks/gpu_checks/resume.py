"""A fit killed mid-run on the GPU and run again resumes bitwise against an uninterrupted one;
a finished fit's rerun trains nothing. As on a T4: fp16 with its GradScaler (KAGGLEKIT_AS=t4)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, main

JOB = REPO / "tests" / "jobs" / "resume_job.py"
ENV = {**os.environ, "KAGGLEKIT_AS": "t4"}


def _run(ckpt: Path, out: Path) -> dict:
    import torch
    done = subprocess.run([sys.executable, str(JOB), "--ckpt", str(ckpt), "--out", str(out), "--device", "cuda"],
                          env=ENV, capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(f"the job failed: {done.stderr.strip()[-600:]}")
    return torch.load(out, weights_only=True)


def _kill_at(ckpt: Path, step: int) -> None:
    proc = subprocess.Popen([sys.executable, str(JOB), "--ckpt", str(ckpt), "--out", os.devnull, "--device", "cuda"],
                            env=ENV, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.strip() == f"step {step}":
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(60)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError("the job finished before it could be killed")


def check():
    import torch
    with tempfile.TemporaryDirectory(prefix="gpu-check-resume-") as tmp:
        tmp = Path(tmp)
        reference = _run(tmp / "ref", tmp / "ref.pt")
        _kill_at(tmp / "ckpt", 13)
        resumed = _run(tmp / "ckpt", tmp / "resumed.pt")
        again = _run(tmp / "ckpt", tmp / "again.pt")
    same = all(torch.equal(resumed["model"][k], reference["model"][k]) for k in reference["model"])
    facts = {"precision": resumed["precision"], "resumed_from": Path(str(resumed["resumed_from"])).name,
             "bitwise_equal": same, "rerun_stopped": again["stopped"]}
    ok = same and resumed["resumed_from"] and resumed["precision"] == "fp16" and again["stopped"] == "already_complete"
    return ok, facts


if __name__ == "__main__":
    main(check)
