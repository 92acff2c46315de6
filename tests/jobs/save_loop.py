"""Writes large checkpoints in a loop; the test SIGKILLs it mid-write."""
import sys

import torch

from kagglekit.state.checkpoint import CheckpointManager

manager = CheckpointManager(sys.argv[1], keep_last=2, search=[])
for step in range(1, 10_000):
    # ~16 MB of weights whose values encode the step, so a mix-up would show.
    state = {"model": {"w": torch.full((4_000_000,), float(step))}, "loop": {"step": step}}
    manager.save(state, step=step)
    print(f"saved {step}", flush=True)
