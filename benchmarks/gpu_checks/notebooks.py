"""Every notebook at smoke size on the GPU, as on a T4 (KAGGLEKIT_AS=t4), five at a time.

Each notebook reports its row as it ends (a PART line), and the check keeps its own deadline
inside gpu_check.py's limit: on the lent H100 the first version ran three at a time with 150 s
each, past that limit, and was killed with no row at all.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from common import REPO, main

LIMIT_S = 150  # one notebook's smoke run at most
# the whole check, inside what gpu_check.py gives it: what has not started by then is named, not run
DEADLINE_S = float(os.environ.get("KAGGLEKIT_CHECK_DEADLINE_S", 225))
AT_ONCE = 5  # five T4 caps of 15 GiB fit an 80 GB card, and the machine has 16 cores


def one(name: str, out: str, deadline: float) -> dict:
    started = time.monotonic()
    left = deadline - started
    if left < 30:  # not even a kernel's start and imports
        return part({"notebook": name, "ok": False, "seconds": 0.0, "tail": ["not started: the check's time ran out"]})
    env = {**os.environ, "KAGGLEKIT_AS": "t4"}
    try:
        done = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "run", name, "-p", "smoke=True",
                               "--output", out], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=min(LIMIT_S, left))
        ok, tail = done.returncode == 0, (done.stdout + done.stderr).strip().splitlines()[-3:]
    except subprocess.TimeoutExpired:
        ok, tail = False, [f"still running after {min(LIMIT_S, left):.0f} s"]
    return part({"notebook": name, "ok": ok, "seconds": round(time.monotonic() - started, 1),
                 **({} if ok else {"tail": tail})})


def part(row: dict) -> dict:
    """A notebook's row, printed as it ends: gpu_check.py keeps them if the check is killed."""
    print("PART " + json.dumps(row), flush=True)
    return row


def check(names: list[str] | None = None):
    names = names or sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    deadline = time.monotonic() + DEADLINE_S
    with tempfile.TemporaryDirectory(prefix="gpu-check-runs-") as out, ThreadPoolExecutor(AT_ONCE) as pool:
        rows = list(pool.map(lambda n: one(n, out, deadline), names))
    return all(r["ok"] for r in rows), {"notebooks": rows}


if __name__ == "__main__":
    main(check)
