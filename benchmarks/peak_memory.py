"""The machine's used memory at its peak while a command runs, above its level at the start.

Used is the anonymous and shared memory (AnonPages + Shmem, ``launch_payload.used_bytes``): every
process's own memory (a notebook, its ranks, their loader workers) counted once, and a file's pages
in the page cache, mapped by any number of processes, not at all (the kernel drops them under
pressure). For a whole notebook run, old code against new: run it twice, each alone on the machine.

    KAGGLEKIT_EMULATE=t4x2 python benchmarks/peak_memory.py [--trace FILE] -- \\
        python -m kagglekit.tools.cli run image_classification -p image_size=192
"""
from __future__ import annotations

import argparse
import subprocess
import threading
import time

from launch_payload import used_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", help="write 'seconds MiB' every 0.1 s here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    base, peak, done = used_bytes(), [0, 0.0], threading.Event()
    started = time.monotonic()
    trace = open(args.trace, "w") if args.trace else None  # noqa: SIM115 - closed below

    def watch():
        while not done.is_set():
            above, at = used_bytes() - base, time.monotonic() - started
            if trace:
                trace.write(f"{at:.1f} {above / 2**20:.0f}\n")
            if above > peak[0]:
                peak[:] = [above, at]
            time.sleep(0.1)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        rc = subprocess.call(command)
    finally:
        done.set()
        watcher.join()
        if trace:
            trace.close()
    print(f"exit status {rc}, {time.monotonic() - started:.1f} s; used memory at its peak: "
          f"+{peak[0] / 2**20:,.0f} MiB above the start, at {peak[1]:.1f} s")


if __name__ == "__main__":
    main()
