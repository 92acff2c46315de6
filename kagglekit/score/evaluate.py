"""Validation metrics that are correct under DDP: sums are reduced over every rank.

Each evaluator is ``evaluate(model, limit_batches=None)``: ``fit`` passes its own
``limit_batches`` (a smoke run's, or the sandbox's work cap), so a capped run's validation is
capped too."""
from __future__ import annotations

import itertools

import torch
import torch.distributed as dist

from ..parallel import loaders as data, ranks


def all_sum(t: torch.Tensor) -> torch.Tensor:
    """``t`` summed over every rank (in place; unchanged outside DDP)."""
    if ranks.distributed():
        dist.all_reduce(t)
    return t


def classification(loader, device, loss=torch.nn.functional.cross_entropy):
    """``evaluate(model) -> {"val_loss", "val_acc"}`` over ``loader`` (all ranks together)."""
    def evaluate(model, limit_batches: int | None = None) -> dict:
        total = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
        for batch in itertools.islice(loader, limit_batches):
            x, y = data.to_device(batch, device)
            logits = model(x)
            total += torch.stack([loss(logits.float(), y, reduction="sum").double(),
                                  (logits.argmax(1) == y).sum().double(),
                                  torch.tensor(float(len(y)), dtype=torch.float64, device=device)])
        total = all_sum(total)
        return {"val_loss": (total[0] / total[2]).item(), "val_acc": (total[1] / total[2]).item()}
    return evaluate


def node_logits(model, data, device) -> torch.Tensor:
    """Logits of every node from one full-graph forward, in float32 (outside autocast:
    fp16 logits tie many scores and distort PR-AUC); on the CPU."""
    device = torch.device(device)
    model.eval()
    with torch.no_grad(), torch.autocast(device.type, enabled=False):
        return model(data.x.to(device), data.edge_index.to(device)).float().cpu()


def nodes(data, mask: torch.Tensor, device, prefix: str = "val_"):
    """``evaluate(model)``: scikit-learn scores of the nodes in ``mask`` (accuracy, macro
    F1 and PR-AUC for several classes; PR-AUC, ROC-AUC, F1 for one logit) from one
    full-graph forward. The graph is moved to ``device`` once, not per evaluation."""
    from torch_geometric.data import Data

    from . import metrics
    graph = Data(x=data.x.to(device), edge_index=data.edge_index.to(device))
    labels = data.y[mask]

    def evaluate(model) -> dict:
        logits = node_logits(model, graph, device)[mask]
        return {prefix + k: v for k, v in metrics.classification(logits, labels).items()}
    return evaluate
