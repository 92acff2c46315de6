"""Files decoded in worker processes, in order, never far ahead of the one who takes them.

Decoding (audio by libsndfile, images by Pillow) is the CPU's work on Kaggle's 4 vCPUs, so the
readers hand it to worker processes. ``pool.map`` submits every file at once and keeps each result
until it is taken: a consumer slower than the decoders (a spectrogram computed on the CPU, a
copy into a preallocated array) then finds the whole set decoded and waiting in memory, beside
the array it fills (measured on the audio notebook's windows: 1,180 MB of waves queued behind a
296 MB array of spectrograms). Here at most ``AHEAD`` chunks of ``CHUNK`` files per worker are
decoded and not yet taken.
"""
from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

AHEAD = 2  # chunks decoded ahead per worker: enough to keep them busy, few enough to bound the memory
CHUNK = 8  # files a worker decodes per task


def _decode_chunk(fn: Callable, paths: list) -> list:
    return [fn(p) for p in paths]


def each_decoded(paths: list[Path], fn: Callable, workers: int = 1) -> Iterator:
    """``fn(path)`` for every path, in order, yielded as it comes back from ``workers`` processes
    (forked: ``fn`` may be a partial of the caller's functions; it never touches CUDA)."""
    if workers <= 1 or len(paths) < 2:
        yield from (fn(p) for p in paths)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    chunks = iter([paths[i:i + CHUNK] for i in range(0, len(paths), CHUNK)])
    with ProcessPoolExecutor(min(workers, len(paths)), mp_context=mp.get_context("fork")) as pool:
        submit = lambda chunk: pool.submit(_decode_chunk, fn, chunk)  # noqa: E731
        pending = collections.deque(submit(c) for c in itertools.islice(chunks, AHEAD * workers))
        while pending:
            done = pending.popleft().result()
            pending.extend(submit(c) for c in itertools.islice(chunks, 1))  # the next one, if any left
            yield from done


def decode_all(paths: list[Path], fn: Callable, workers: int = 1) -> list:
    """``fn(path)`` for every path, in worker processes, as a list (for results small enough to hold)."""
    return list(each_decoded(paths, fn, workers))
