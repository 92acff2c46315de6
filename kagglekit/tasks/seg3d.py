"""3-D U-Net training on patches, then sliding-window inference on held-out volumes."""
from __future__ import annotations

import math

import torch

from .. import checkpoint, data, evaluate, launcher, models, policy, segment3d, workcap
from ..precision import Precision
from ..train import fit


def _scheduler(optimizer, warmup_steps: int, restart_steps: int):
    """Linear warm-up, then cosine annealing with warm restarts (torch's own)."""
    warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.05,
                                             total_iters=max(1, warmup_steps))
    cosine = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=max(1, restart_steps))
    return torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cosine],
                                                 milestones=[max(1, warmup_steps)])


def train_and_predict(cfg: dict, volumes: dict) -> dict | None:
    """Train (or resume, or skip when finished) and predict the test volumes on rank 0.

    Args:
        cfg: the notebook's parameters (patch, width, depth, batch_size, accumulate,
            epochs, patches_per_epoch, lr, warmup_steps, restart_epochs, precision,
            save_every_min, seed, overlap); the run decides precision, resume and budget.
        volumes: {"train": (vols, masks), "val": (vols, masks), "test": (vols, masks, ids)}.
    """
    ctx = launcher.context()
    torch.manual_seed(cfg["seed"])
    model = models.UNet3D(width=cfg["width"], depth=cfg["depth"])
    train = segment3d.Patches(*volumes["train"], cfg["patch"], cfg["patches_per_epoch"], cfg["seed"])
    val = segment3d.Patches(*volumes["val"], cfg["patch"], max(16, cfg["patches_per_epoch"] // 4),
                            cfg["seed"] + 1)
    train_loader = data.make_loader(train, cfg["batch_size"], seed=cfg["seed"], device=ctx.device)
    val_loader = data.make_loader(val, cfg["batch_size"], train=False, device=ctx.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=1e-4)
    steps_per_epoch = math.ceil(len(train_loader) / cfg["accumulate"])
    scheduler = _scheduler(optimizer, cfg["warmup_steps"], cfg["restart_epochs"] * steps_per_epoch)
    loss_fn = lambda m, batch: segment3d.dice_bce_loss(m(batch[0]), batch[1])  # noqa: E731
    ckpt = policy.current().checkpoints("unet3d", monitor="val_dice", mode="max",
                                        data=[volumes["train"], volumes["val"]])  # not test
    result = fit(model, optimizer, train_loader, loss_fn, epochs=cfg["epochs"],
                 evaluate=evaluate.segmentation(val_loader, ctx.device, segment3d.dice_bce_loss),
                 scheduler=scheduler, device=ctx.device,
                 accumulate=cfg["accumulate"], clip_grad_norm=1.0, checkpoints=ckpt,
                 save_every_min=cfg["save_every_min"],
                 config={k: v for k, v in cfg.items() if k != "overlap"})  # inference-only
    if not ctx.is_main:
        return None
    out = {"fit": result.summary(), "history": result.history}
    if result.finished:
        out.update(_predict(model, ckpt, volumes["test"], cfg, result))
    return out


def _predict(model, ckpt, test, cfg: dict, result) -> dict:
    best = ckpt.best()
    if best is not None:  # the best validation Dice, not merely the last epoch
        checkpoint.unwrap(model).load_state_dict(checkpoint.load(best, "cpu")["model"])
    vols, masks, ids = (part[:workcap.steps(len(test[2]))] for part in test)
    chosen = Precision(result.precision, next(model.parameters()).device.type)  # what fit used
    autocast = chosen.autocast()
    probs = [segment3d.sliding_window(model, v, cfg["patch"], cfg["overlap"], autocast=autocast)
             for v in vols]
    preds = [(p > 0.5).to(torch.uint8) for p in probs]
    scores = [segment3d.dice(p, m[0]) for p, m in zip(preds, masks)]
    return {"test_dice": sum(scores) / len(scores), "test_dice_per_volume": dict(zip(ids, scores)),
            "best_checkpoint": str(best.path) if best else None,
            "predictions": {i: p for i, p in zip(ids, preds)}}
