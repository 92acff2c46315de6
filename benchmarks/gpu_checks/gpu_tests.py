"""The suite's tests marked `gpu` (CUDA-graph replay against eager, NVML sampling), which CI
skips for want of a GPU."""
from __future__ import annotations

import re
import subprocess
import sys

from common import REPO, main


def check():
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                           "tests/test_cudagraph.py", "tests/test_monitor.py"], cwd=REPO, capture_output=True,
                          text=True, timeout=170)
    summary = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    if done.returncode:
        print(done.stdout[-3000:])
    return done.returncode == 0, {"pytest": summary[-1] if summary else "no summary"}


if __name__ == "__main__":
    main(check)
