"""`make gpu-check`: everything only a GPU can show, in one command, recorded with date and device.

On a machine with a CUDA GPU: the `gpu`-marked tests, the gpu_figures notebook (the write-ups'
figures on the pipelines' own models: its judged table appended as `make results` appends a
Kaggle version's), benchmarks/gpu_figures.py and `make sandbox` (what push sends, three
versions per notebook), each summarised as a dated row with the device's name appended to
benchmarks/RESULTS.md. Without a GPU it says so and exits 0 (CI and laptops run it harmlessly).
"""
from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "RESULTS.md"


def _run(args: list[str], timeout: float = 3600) -> tuple[int, str]:
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def _tests() -> str:
    code, out = _run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"])
    tail = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    return f"gpu-marked tests: {tail[-1] if tail else 'no summary'} (exit {code})"


def _figures() -> list[str]:
    code, out = _run([sys.executable, "benchmarks/gpu_figures.py"])
    keep = [line.strip() for line in out.splitlines() if "ratio" in line or ":" in line[:4]]
    return [f"gpu_figures.py (exit {code}):", *[f"    {line}" for line in keep]]


def _figures_notebook() -> list[str]:
    code, out = _run([sys.executable, "-m", "kagglekit.tools.cli", "run", "gpu_figures", "--kaggle"])
    if code != 0:
        return [f"gpu_figures notebook (exit {code}):", *[f"    {line}" for line in out.splitlines()[-5:]]]
    sys.path.insert(0, str(REPO))
    from kagglekit.tools.figuretable import append_local
    return [f"gpu_figures notebook (exit 0): {append_local(REPO / 'runs' / 'gpu_figures' / 'latest', RESULTS)}"]


def _sandbox() -> list[str]:
    code, out = _run([sys.executable, "-m", "kagglekit.tools.cli", "sandbox"])
    lines = [line for line in out.splitlines() if line.startswith("sandbox")]
    return [f"make sandbox (exit {code}):", *[f"    {line}" for line in lines or out.splitlines()[-5:]]]


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU on this machine: nothing to measure (the gpu-marked tests, "
              "gpu_figures.py and the sandbox on a GPU need one). Exit 0.")
        return 0
    device = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    today = datetime.date.today().isoformat()
    rows = [_tests(), *_figures_notebook(), *_figures(), *_sandbox()]
    block = "\n".join([f"\n### gpu-check {today} on {device} (torch {torch.__version__})", "",
                       "```", *rows, "```", ""])
    with RESULTS.open("a") as f:
        f.write(block)
    print(block)
    return 1 if any("exit 0)" not in r and "(exit" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
