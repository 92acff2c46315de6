"""Two gloo ranks training slowly through kk.launch; the test sends the parent a SIGINT
(Kaggle's Stop button) and expects every rank to agree on a step, save, and stop."""
import sys
import time

import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import datasets, launcher, loaders as data, models


def train(ckpt: str, sleep: float) -> dict:
    kk.seed_everything(0)
    model = models.MLP(16, 32, 4)

    def announce(state):
        time.sleep(sleep)
        if kk.ranks.is_main():
            print(f"step {state.step}", flush=True)

    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    data.make_loader(datasets.tabular(2048, features=16), 16, num_workers=0),
                    kk.supervised(F.cross_entropy), epochs=2, progress=False,
                    checkpoints=kk.CheckpointManager(ckpt, search=[]), on_step_end=announce)
    return {"resumed_from": result.resumed_from, "steps": result.steps,
            "this_session": result.steps_this_session}


if __name__ == "__main__":
    print(launcher.launch(train, sys.argv[1], float(sys.argv[2]), nprocs=2), flush=True)
