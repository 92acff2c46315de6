"""Validation metrics that are correct under DDP: sums are reduced over every rank.

Each evaluator is ``evaluate(model, limit_batches=None)``: ``fit`` passes its own
``limit_batches`` (a smoke run's, or the sandbox's work cap), so a capped run's validation is
capped too."""
from __future__ import annotations

import itertools

import torch
import torch.distributed as dist

from ..parallel import loaders as data, ranks
from ..readers.volumes import IGNORE


def _all_sum(t: torch.Tensor) -> torch.Tensor:
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
        total = _all_sum(total)
        return {"val_loss": (total[0] / total[2]).item(), "val_acc": (total[1] / total[2]).item()}
    return evaluate


def segmentation(loader, device, loss_fn, ignore: int = IGNORE, scored: int = 64):
    """``evaluate(model) -> {"val_loss", "val_dice", "val_score"}`` over patches (all ranks
    together); labels equal to ``ignore`` count in neither. ``val_score``: the Vesuvius
    leaderboard score (``surfacescore``, what the competition ranks) averaged over the first
    ``scored`` patches of each rank, counted on the CPU (about 0.12 s for a 96^3 patch: all of
    Kaggle's 512 validation patches would add a minute per epoch); 0 leaves it out."""
    from .surfacescore import vesuvius_score

    def evaluate(model, limit_batches: int | None = None) -> dict:
        total = torch.zeros(4, dtype=torch.float64, device=device)  # loss, inter, sizes, n
        points = torch.zeros(2, dtype=torch.float64)  # score sum, patches scored
        for batch in itertools.islice(loader, limit_batches):
            x, y = data.to_device(batch, device)
            logits = model(x)
            keep = (y != ignore).float()
            pred, surface = (logits > 0).float() * keep, (y == 1).float()
            total += torch.stack([loss_fn(logits, y).double() * len(y),
                                  (pred * surface).sum().double(), (pred.sum() + surface.sum()).double(),
                                  torch.tensor(float(len(y)), dtype=torch.float64, device=device)])
            take = int(min(len(y), scored - points[1].item()))
            if take > 0:
                points += torch.tensor([sum(vesuvius_score(p[0], t[0])["score"] for p, t in zip(
                    (logits[:take] > 0).cpu().numpy(), y[:take].cpu().numpy())), take])
        total, points = _all_sum(total), _all_sum(points.to(device))
        found = {"val_loss": (total[0] / total[3]).item(), "val_dice": (2 * total[1] / total[2].clamp(min=1)).item()}
        return {**found, "val_score": (points[0] / points[1]).item()} if scored > 0 else found
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
