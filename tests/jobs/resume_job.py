"""A small but complete training run, used by the resume tests as a subprocess.

It prints "step N" after every optimizer step so the test can SIGKILL it at a
chosen step, and writes the final weights to --out.
"""
import argparse
import sys

import torch

import kagglekit as kk
from kagglekit import datasets, loaders as data, models


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--save-every", default="0", help="minutes between saves; 'none': epoch ends only")
    ap.add_argument("--device", default="cpu", help="cuda: the GPU check's resume on the card")
    ap.add_argument("--ema", type=float, default=0.0, help="a moving average of the weights at this decay")
    args = ap.parse_args()

    kk.seed_everything(7)
    train_set, val_set = datasets.split(datasets.tabular(640, features=16, seed=7))
    model = models.MLP(16, 32, 4, dropout=0.2)  # dropout: resume must restore the RNG
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    steps = args.epochs * (len(train_set) // 32 // 2)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=steps)

    ema = kk.Ema(args.ema) if args.ema else None

    def announce(state):
        if args.sleep:
            import time
            time.sleep(args.sleep)
        print(f"step {state.step}", flush=True)

    result = kk.fit(model, optimizer, data.make_loader(train_set, 32, seed=7, num_workers=args.workers),
                    kk.supervised(torch.nn.functional.cross_entropy), run=kk.Alone(device=args.device),
                    epochs=args.epochs, val_loader=data.make_loader(val_set, 64, train=False, num_workers=0),
                    scheduler=scheduler, accumulate=2, clip_grad_norm=1.0,
                    checkpoints=kk.CheckpointManager(args.ckpt, keep_last=3, save_every_min=None
                                                     if args.save_every == "none" else float(args.save_every)),
                    on_step_end=announce, progress=False, ema=ema)
    torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()}, "history": result.history,
                "resumed_from": result.resumed_from, "stopped": result.stopped,
                "precision": result.precision,
                "ema": {k: v.cpu() for k, v in ema.model.state_dict().items()} if ema else None}, args.out)
    print(f"done {result.stopped}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
