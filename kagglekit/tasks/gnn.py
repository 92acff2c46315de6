"""GNN node classification: self-supervised pre-training, fine-tuning, an MLP baseline."""
from __future__ import annotations


import torch
from torch import nn
from torch.nn import functional as F

from .. import checkpoint, data as data_mod, graph, launcher, metrics, models, policy
from ..train import fit


class SAGEEncoder(nn.Module):
    """GraphSAGE layers (mean aggregation) producing node embeddings."""

    def __init__(self, features: int, hidden: int, layers: int = 2, dropout: float = 0.2):
        super().__init__()
        from torch_geometric.nn import SAGEConv
        self.convs = nn.ModuleList([SAGEConv(features if i == 0 else hidden, hidden)
                                    for i in range(layers)])
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), self.dropout, self.training)
        return x


class NodeClassifier(nn.Module):
    def __init__(self, encoder: nn.Module, hidden: int, classes: int):
        super().__init__()
        self.encoder, self.head = encoder, nn.Linear(hidden, 1 if classes == 2 else classes)

    def forward(self, x, edge_index):
        return self.head(F.relu(self.encoder(x, edge_index)))


def classes_of(data) -> int:
    return int(data.y.max()) + 1


def node_loss(classes: int, pos_weight: float = 1.0):
    """Loss on the seed nodes of a sampled batch (BCE with a positive weight, or CE)."""
    def loss_fn(model, batch):
        logits = model(batch.x, batch.edge_index)[: batch.batch_size]
        y = batch.y[: batch.batch_size]
        if classes == 2:
            weight = torch.tensor(pos_weight, device=logits.device)
            return F.binary_cross_entropy_with_logits(logits[:, 0].float(), y.float(), pos_weight=weight)
        return F.cross_entropy(logits.float(), y)
    return loss_fn


def scores_of(logits: torch.Tensor, y: torch.Tensor, classes: int) -> dict:
    """PR-AUC, ROC-AUC and F1 for a binary label; accuracy, macro F1 and macro PR-AUC
    (one class against the rest) otherwise; all by scikit-learn, from float32 logits."""
    return metrics.classification(logits.float().cpu()[:, 0] if classes == 2 else logits.float().cpu(),
                                  y.cpu())


def full_graph_evaluator(data, mask: torch.Tensor, classes: int, device, prefix: str = "val_"):
    """``evaluate(model)``: scores on ``mask`` from one full-graph forward pass.

    The pass runs outside autocast: fp16 logits would tie many scores and distort PR-AUC.
    """
    def evaluate(model) -> dict:
        with torch.autocast(torch.device(device).type, enabled=False):
            logits = model(data.x.to(device), data.edge_index.to(device))
        return {prefix + k: v for k, v in scores_of(logits[mask.to(device)], data.y[mask], classes).items()}
    return evaluate


def _link_batches(data, batch_size: int, fanouts: list[int], seed: int, device):
    """Edge mini-batches with their sampled neighbourhoods (bounded memory)."""
    sampler = graph.NeighborSampler(data, fanouts, seed)
    n = data.num_nodes

    def collate(ids):
        ids = torch.stack(ids) if isinstance(ids, list) else ids
        pos = data.edge_index[:, ids]
        g = torch.Generator().manual_seed(int(ids.sum()) + seed)  # the same negatives on resume
        neg = torch.randint(0, n, pos.shape, generator=g)
        nodes, inverse = torch.unique(torch.cat([pos, neg], 1), return_inverse=True)
        sub = sampler(nodes)
        return sub, inverse[:, : pos.shape[1]], inverse[:, pos.shape[1]:]

    edges = torch.arange(data.edge_index.shape[1])
    return data_mod.make_loader(edges, batch_size, seed=seed, device=device, num_workers=0,
                                collate_fn=collate)


def link_loss(encoder, batch):
    sub, pos, neg = batch
    z = encoder(sub.x, sub.edge_index)
    score = lambda e: (z[e[0]] * z[e[1]]).sum(-1).float()  # noqa: E731
    return F.binary_cross_entropy_with_logits(score(pos), torch.ones(pos.shape[1], device=z.device)) + \
        F.binary_cross_entropy_with_logits(score(neg), torch.zeros(neg.shape[1], device=z.device))


def pretrain(cfg: dict, data) -> dict | None:
    """Self-supervised link reconstruction of the encoder (launched); rank 0 returns weights."""
    ctx = launcher.context()
    torch.manual_seed(cfg["seed"])
    encoder = SAGEEncoder(data.num_features, cfg["hidden"], dropout=cfg["dropout"])
    loader = _link_batches(data, cfg["edge_batch"], cfg["fanouts"], cfg["seed"], ctx.device)
    result = fit(encoder, torch.optim.AdamW(encoder.parameters(), lr=cfg["lr"]), loader, link_loss,
                 epochs=cfg["pretrain_epochs"], limit_batches=cfg["pretrain_batches"] or None,
                 checkpoints=policy.current().checkpoints("pretrain", data=[data.x, data.edge_index]),
                 config={k: cfg[k] for k in ("hidden", "dropout", "edge_batch", "fanouts", "lr",
                                             "pretrain_batches", "seed")})
    if not ctx.is_main:
        return None
    return {"state": {k: v.cpu() for k, v in checkpoint.unwrap(encoder).state_dict().items()},
            "history": result.history, "fit": result.summary()}


def finetune(cfg: dict, data, encoder_state: dict | None, keep_checkpoints: bool = False,
             hook=None, epochs: int | None = None) -> dict | None:
    """Train the classifier (pre-trained encoder, all layers tuned); rank 0 returns scores.

    ``keep_checkpoints``: the final model's (resumable, skipped when finished; the run's
    ``force_retrain`` retrains it); search trials keep none."""
    ctx = launcher.context()
    torch.manual_seed(cfg["seed"])
    classes = classes_of(data)
    encoder = SAGEEncoder(data.num_features, cfg["hidden"], dropout=cfg["dropout"])
    if encoder_state is not None:
        encoder.load_state_dict(encoder_state)
    model = NodeClassifier(encoder, cfg["hidden"], classes)
    loader = graph.seed_loader(data, data.train_mask, cfg["fanouts"], cfg["batch_size"],
                               seed=cfg["seed"], device=ctx.device,
                               backend=cfg.get("sampler", "auto"))
    positives = float(data.y[data.train_mask].float().mean()) if classes == 2 else 0.5
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    run = policy.current()
    ckpt = run.checkpoints("gnn", data=data, monitor="val_pr_auc", mode="max") \
        if keep_checkpoints and run else None
    result = fit(model, opt, loader, node_loss(classes, (1 - positives) / max(positives, 1e-6)),
                 epochs=epochs or cfg["epochs"], device=ctx.device,
                 evaluate=full_graph_evaluator(data, data.val_mask, classes, ctx.device),
                 on_epoch_end=hook, checkpoints=ckpt, config=cfg)
    if not ctx.is_main:
        return None
    model.eval()
    with torch.no_grad():
        logits = model(data.x.to(ctx.device), data.edge_index.to(ctx.device)).cpu()
    test = data.test_mask
    out = {"history": result.history, "fit": result.summary(),
           **{f"test_{k}": v for k, v in scores_of(logits[test], data.y[test], classes).items()}}
    if classes == 2:
        out["test_scores"] = logits[test][:, 0].tolist()
        out["test_labels"] = data.y[test].tolist()
    return out


def mlp_baseline(cfg: dict, data) -> dict:
    """The same task from node features alone: what the graph adds is the difference."""
    torch.manual_seed(cfg["seed"])
    classes = classes_of(data)
    model = models.MLP(data.num_features, cfg["hidden"], 1 if classes == 2 else classes, dropout=0.2)
    train = torch.utils.data.TensorDataset(data.x[data.train_mask], data.y[data.train_mask])
    positives = float(data.y[data.train_mask].float().mean()) if classes == 2 else 0.5

    def loss_fn(m, batch):
        x, y = batch
        if classes == 2:
            w = torch.tensor((1 - positives) / max(positives, 1e-6))
            return F.binary_cross_entropy_with_logits(m(x)[:, 0], y.float(), pos_weight=w)
        return F.cross_entropy(m(x), y)

    fit(model, torch.optim.AdamW(model.parameters(), lr=cfg["lr"]),
        data_mod.make_loader(train, cfg["batch_size"], seed=cfg["seed"], num_workers=0),
        loss_fn, epochs=cfg["epochs"], device="cpu", progress=False)
    model.eval()
    with torch.no_grad():
        logits = model(data.x[data.test_mask])
    out = {f"test_{k}": v for k, v in scores_of(logits, data.y[data.test_mask], classes).items()}
    if classes == 2:
        out["test_scores"] = logits[:, 0].tolist()
    return out


def objective(cfg: dict, data, encoder_state):
    """Optuna objective over the fine-tuning hyperparameters; pruned on validation PR-AUC."""
    from .. import tune

    def run(trial) -> float:
        params = {**cfg, "lr": trial.suggest_float("lr", 1e-4, 3e-2, log=True),
                  "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-2, log=True)}
        out = finetune(params, data, encoder_state, hook=tune.pruning_hook(trial, "val_pr_auc"),
                       epochs=cfg["search_epochs"])
        return out["history"][-1]["val_pr_auc"]
    return run


def pr_figure(curves: dict):
    from ..plots import _pyplot
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, (scores, labels) in curves.items():
        precision, recall = metrics.pr_curve(scores, labels)
        ap = metrics.average_precision(scores, labels)
        ax.plot(recall, precision, drawstyle="steps-post", label=f"{name} (PR-AUC {ap:.3f})")
    ax.set(xlabel="recall", ylabel="precision", title="test precision-recall", ylim=(0, 1.02))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
