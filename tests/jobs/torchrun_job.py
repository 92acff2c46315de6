"""A training function as a notebook hands it to kk.launch, started by torchrun instead.

Under torchrun, ``kk.launch`` joins the process group torchrun set up (c10d rendezvous,
every node), and everything else is unchanged: the sampler shards over the global
world, rank 0 writes the checkpoints, every rank resumes from them. Prints "step N" on
rank 0 after each step; rank 0 saves the final weights to --out.
"""
import argparse
import os
import time
from pathlib import Path

import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import datasets, loaders as data, models


def train(ckpt: str, out: str, steps: int, per_gpu_batch: int, sleep: float) -> None:
    kk.seed_everything(0)
    ds = datasets.tabular(512, features=16, seed=0)
    model = models.MLP(16, 32, 4)

    def announce(state):
        time.sleep(sleep)
        if kk.ranks.is_main():
            print(f"step {state.step}", flush=True)

    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.5),
                    data.make_loader(ds, per_gpu_batch, num_workers=0), kk.supervised(F.cross_entropy),
                    epochs=100, max_steps=steps, progress=False,
                    checkpoints=kk.CheckpointManager(ckpt, search=[], save_every_min=0), on_step_end=announce)
    if kk.ranks.is_main():
        torch.save({"model": model.state_dict(), "world": result.world_size,
                    "resumed_from": result.resumed_from}, out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()
    # torchrun starts each worker in a session of its own: a test that kills the job needs
    # the workers' pids, not only the agents'.
    pids = Path(f"{args.out}.pids")
    pids.mkdir(exist_ok=True)
    (pids / str(os.getpid())).touch()
    kk.launch(train, args.ckpt, args.out, args.steps, args.batch, args.sleep,
              timeout_s=120)  # a rank out of step is an error in 2 minutes, not a 30-minute wait
