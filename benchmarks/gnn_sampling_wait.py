"""The GNN training loop's wait for its next batch: neighbour sampling in the loop against in loader
workers, with the step's compute standing where a GPU's would.

On a card the step's arithmetic runs on the GPU and the host thread mostly waits for it, so the
CPU is free to sample the next batch, in a loader worker, while the card computes: then the loop
waits only for what sampling takes beyond the step. Here the step is a sleep of a GPU step's length
(``STEP_MS``: the card computing, the host idle), and the loop's wait is the time ``next(loader)``
blocks, the median over ``BATCHES`` batches after the workers' warm-up, for the kit's
``seed_loader`` with the sampling in the loop (0 workers) and in 1 and 2 workers (Kaggle's T4 x2:
4 vCPUs, 2 ranks, 1 worker each). The graph is the built-in fraud-like one at the Elliptic data
set's size (203,769 nodes), batch 512, fan-outs 10,5 (the notebook's).
"""
from __future__ import annotations

import statistics
import time

import kagglekit as kk

NODES, BATCH, FANOUTS, BATCHES = 203_769, 512, [10, 5], 40
STEP_MS = (2.0, 8.0)  # a GPU step's time for this model: short (the GCN), longer (a wider SAGE)


def loop_wait_ms(data, workers: int, step_ms: float) -> float:
    loader = kk.graph.seed_loader(data, data.train_mask, FANOUTS, BATCH, workers=workers)
    batches, waits = iter(loader), []
    next(batches)  # the workers started, their queues filled
    time.sleep(0.5)
    for _ in range(BATCHES):
        started = time.perf_counter()
        try:
            next(batches)
        except StopIteration:
            batches = iter(loader)
            next(batches)
        waits.append(time.perf_counter() - started)
        time.sleep(step_ms / 1e3)  # the card computing: the host thread idle
    return 1e3 * statistics.median(waits[len(waits) // 4:])  # the steady part


def main() -> None:
    data = kk.graphsets.load(None, nodes=NODES, positive_rate=0.05, seed=0)
    print(f"the loop's wait per step, {NODES} nodes, batch {BATCH}, fan-outs {FANOUTS}, median of {BATCHES}")
    for step_ms in STEP_MS:
        in_loop = loop_wait_ms(data, 0, step_ms)
        print(f"  step {step_ms:4.1f} ms: sampling in the loop, the loop waits {in_loop:6.2f} ms a step")
        for workers in (1, 2):
            wait = loop_wait_ms(data, workers, step_ms)
            print(f"  step {step_ms:4.1f} ms: sampling in {workers} worker{'s' * (workers > 1)}, the loop waits "
                  f"{wait:6.2f} ms a step ({wait / in_loop:.2f}x in the loop)")


if __name__ == "__main__":
    main()
