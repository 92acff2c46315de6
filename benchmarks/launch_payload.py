"""What a tensor the launched function refers to costs in memory while the ranks run.

``kk.launch`` forks its ranks from a clean fork server and sends them the function by value
(cloudpickle): every tensor the function refers to travels in the payload, and each rank unpacks
its own copy (kagglekit/parallel/forkserver.py). The audio and image notebooks' ``train`` refers to
the decoded data (``labelled``), so at a competition's size this, not the array itself, is the
memory a T4 x2 machine must hold. Measured here: the machine's used memory (``used_bytes``:
anonymous and shared, the page cache not counted) above the start, peak while two emulated ranks
hold, once with a function that refers to a tensor and once with one that does not; the ratio is
the copies the tensor costs. Then the same tensor kept as the notebooks keep it now, in a unit's
cache with ``mapped=True``: the function sends its file, and the ranks map it and read every page
(kagglekit/parallel/mapped.py).

    KAGGLEKIT_EMULATE=t4x2 python benchmarks/launch_payload.py [--mib 512]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time


def used_bytes() -> int:
    """The machine's anonymous and shared memory (/proc/meminfo's AnonPages + Shmem): what only swap
    could free, every process's own memory counted once; a file's pages in the page cache, mapped
    by any number of processes, are not in it. (MemTotal - MemAvailable was the measure first; on
    this machine's sandboxed kernel it moved by a fifth of a 300 MiB allocation, AnonPages by all.)"""
    with open("/proc/meminfo") as meminfo:
        fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in meminfo}
    return fields["AnonPages"] + fields["Shmem"]


def peak_while(fn) -> int:
    """The machine's used memory above its level before ``fn``, at its peak while ``fn`` runs."""
    base, peak, done = used_bytes(), [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], used_bytes())
            time.sleep(0.02)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        fn()
    finally:
        done.set()
        watcher.join()
    return peak[0] - base


def read_whole(data) -> float:
    """Every element read, 16 rows at a time (as batches are: a whole-tensor sum in one thread casts a copy)."""
    import torch
    return sum(float(data[i:i + 16].sum(dtype=torch.float32)) for i in range(0, len(data), 16))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    args = parser.parse_args()
    os.environ.setdefault("KAGGLEKIT_EMULATE", "t4x2")
    import torch

    import kagglekit as kk
    data = torch.ones(args.mib, 1024, 512, dtype=torch.float16)  # --mib MiB, as the notebooks' decoded arrays

    def refers():  # what the notebooks' train does: the data reached through a global
        time.sleep(3)
        return float(data[0, 0, 0])

    def refers_not():
        time.sleep(3)
        return 1.0
    kk.launch(refers_not)  # the fork server started and warm: its imports are not counted below
    without = peak_while(lambda: kk.launch(refers_not))
    with_data = peak_while(lambda: kk.launch(refers))
    with tempfile.TemporaryDirectory() as folder:  # a unit's value as the notebooks keep it
        kept = kk.cache.Cache(folder).compute("decoded", "k", lambda: {"train": data}, config={}, mapped=True)
        touched = read_whole(kept["train"])  # its pages read here, as the notebook reads them

        def refers_mapped():
            time.sleep(3)
            return read_whole(kept["train"])  # every page read in each rank
        with_mapped = peak_while(lambda: kk.launch(refers_mapped))
        assert kk.launch(refers_mapped) == touched
    print(f"two ranks, a function that does not refer to the tensor: +{without / 2**20:,.0f} MiB")
    print(f"two ranks, a function that refers to a {args.mib:,} MiB tensor: +{with_data / 2**20:,.0f} MiB")
    print(f"the tensor's cost while the ranks run: x{(with_data - without) / (args.mib * 2**20):.2f} its bytes "
          "(beside the notebook's own copy)")
    mapped_cost = max(0, with_mapped - without) / (args.mib * 2**20)
    print(f"two ranks, the same tensor kept in a unit with mapped=True, read whole by each rank: "
          f"+{with_mapped / 2**20:,.0f} MiB (x{mapped_cost:.2f} its bytes; its pages are the file's, in the page cache "
          "the kernel drops under pressure and reads again: not counted as used)")


if __name__ == "__main__":
    main()
