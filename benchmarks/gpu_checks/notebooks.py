"""Every notebook at smoke size on the GPU, as on a T4 (KAGGLEKIT_AS=t4), three at a time."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from common import REPO, main

LIMIT_S = 150  # one notebook's smoke run


def one(name: str, out: str) -> dict:
    started = time.monotonic()
    env = {**os.environ, "KAGGLEKIT_AS": "t4"}
    try:
        done = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "run", name, "-p", "smoke=True",
                               "--output", out], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=LIMIT_S)
        ok, tail = done.returncode == 0, (done.stdout + done.stderr).strip().splitlines()[-3:]
    except subprocess.TimeoutExpired:
        ok, tail = False, [f"still running after {LIMIT_S} s"]
    return {"notebook": name, "ok": ok, "seconds": round(time.monotonic() - started, 1),
            **({} if ok else {"tail": tail})}


def check():
    names = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    with tempfile.TemporaryDirectory(prefix="gpu-check-runs-") as out, ThreadPoolExecutor(3) as pool:
        rows = list(pool.map(lambda n: one(n, out), names))
    return all(r["ok"] for r in rows), {"notebooks": rows}


if __name__ == "__main__":
    main(check)
