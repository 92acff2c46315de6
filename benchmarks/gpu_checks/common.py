"""What every check of `gpu_check.py` shares: its verdict line, the card, timing."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def report(ok: bool, **facts) -> None:
    """The check's one verdict line, read by gpu_check.py (the rest of its output is its log)."""
    print("RESULT " + json.dumps({"ok": bool(ok), **facts}, default=str), flush=True)


def main(check) -> None:
    """Run ``check() -> (ok, facts)``; any exception is a failure with its last line."""
    started = time.monotonic()
    try:
        ok, facts = check()
    except Exception as err:  # noqa: BLE001 - a check's error is its verdict
        import traceback
        traceback.print_exc()
        ok, facts = False, {"error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}
    report(ok, seconds=round(time.monotonic() - started, 1), **facts)
    sys.exit(0 if ok else 1)


def card():
    import torch
    return torch.device("cuda:0")


def peak_mb(device) -> float:
    import torch
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
