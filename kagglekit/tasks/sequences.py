"""LSTM vs Transformer vs MLP on the same sequences, under the kit's mixed precision."""
from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

from .. import checkpoint, data, evaluate, launcher, memory, models
from ..train import fit, supervised

ARCHITECTURES = ("lstm", "transformer", "mlp")


def build(name: str, features: int, length: int, hidden: int, classes: int) -> torch.nn.Module:
    if name == "lstm":
        return models.LSTMClassifier(features, hidden, classes)
    if name == "transformer":
        return models.TransformerClassifier(features, hidden, classes, length=length)
    if name == "mlp":
        return models.SequenceMLP(features, hidden, classes, length)
    raise ValueError(f"model {name!r} is not one of {ARCHITECTURES}")


def compare(cfg: dict, train_set, val_set, output_dir: str) -> dict | None:
    """Train each model in ``cfg["models"]`` in turn; rank 0 returns one row per model."""
    ctx = launcher.context()
    x, y = train_set[0]
    length, features = x.shape
    classes = int(cfg["classes"])
    rows, histories, fits = [], {}, {}
    for name in cfg["models"]:
        torch.manual_seed(cfg["seed"])
        model = build(name, features, length, cfg["hidden"], classes)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
        train_loader = data.make_loader(train_set, cfg["batch_size"], seed=cfg["seed"],
                                        device=ctx.device)
        val_loader = data.make_loader(val_set, 4 * cfg["batch_size"], train=False, device=ctx.device)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=cfg["lr"], epochs=cfg["epochs"], steps_per_epoch=len(train_loader))
        memory.reset_peak(ctx.device)
        result = fit(model, optimizer, train_loader, supervised(F.cross_entropy),
                     epochs=cfg["epochs"], evaluate=evaluate.classification(val_loader, ctx.device),
                     scheduler=scheduler, precision=cfg["precision"], device=ctx.device,
                     checkpoints=checkpoint.CheckpointManager(
                         Path(output_dir) / "checkpoints" / name, monitor="val_acc", mode="max"),
                     resume=not cfg["force_retrain"], time_budget=cfg["time_budget_s"] or None,
                     config={**cfg, "model": name})
        last = result.history[-1] if result.history else {}
        rows.append({"model": name, "params": sum(p.numel() for p in model.parameters()),
                     "samples_per_s": last.get("samples_per_s"),
                     "peak_memory_mb": memory.peak_mb(ctx.device),
                     "val_acc": last.get("val_acc"), "val_loss": last.get("val_loss"),
                     "precision": result.precision, "stopped": result.stopped})
        histories[name] = result.history
        fits[name] = result.summary()
        del model, optimizer, scheduler, train_loader, val_loader
        memory.release(ctx.device)  # the next model's peak is its own
    return {"table": rows, "histories": histories, "fits": fits} if ctx.is_main else None
