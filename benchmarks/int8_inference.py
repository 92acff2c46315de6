"""int8 against fp32 inference on the CPU: speed and metric, same trained weights, same data.

- GNN: the GCN of gnn_cora.py (the GNN notebook's model at its defaults) trained on the real
  Cora files (200 steps, best-validation weights), then full-graph inference on all 2,708
  nodes in fp32 and through ``kk.int8.quantize``: test accuracy of both, median time of each.
- Sequence models: the sequence_models notebook's own LSTM and Transformer classes (its cells),
  trained on its built-in task at its defaults (4,096 sequences of 48 steps, hidden 48, 10
  epochs, one-cycle AdamW), then batched inference on the validation set (batches of 256) in
  fp32 and int8: validation accuracy of both, median time of each.
- The notebook's Transformer at hidden 512 (untrained; speed, and agreement with fp32), where
  int8 matrix products have enough work to pay for quantising each batch's activations.
Rounds alternate fp32 and int8 so both see the same machine load; speed-ups are ratios of medians.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from gnn_cora import CORA, GCN, plain
from torch import nn
from torch.nn import functional as F

import kagglekit as kk

REPO = Path(__file__).resolve().parents[1]


def notebook_classes(notebook: str, *names: str) -> dict:
    """Classes defined in a notebook's own cells."""
    ns = {"torch": torch, "nn": nn, "F": F, "kk": kk}
    for cell in json.loads((REPO / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and any(f"class {n}(" in source for n in names):
            exec(compile(source.split("\nMODELS = ")[0], notebook, "exec"), ns)
    return {n: ns[n] for n in names}


@torch.inference_mode()
def timed_pair(first, second, rounds: int = 15) -> tuple[float, float]:
    """Median seconds of each, calls alternating (after one warm-up call of each)."""
    first(), second()
    times = ([], [])
    for _ in range(rounds):
        for fn, kept in zip((first, second), times):
            started = time.perf_counter()
            fn()
            kept.append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


def compare(name: str, model: nn.Module, predict, score, recurrent: bool = False) -> None:
    model.eval()
    quantised = kk.int8.quantize(model, recurrent=recurrent)
    fp32_s, int8_s = timed_pair(lambda: predict(model), lambda: predict(quantised))
    with torch.inference_mode():
        fp32_score, int8_score = score(predict(model)), score(predict(quantised))
    print(f"{name}:\n  fp32 {fp32_s * 1e3:7.1f} ms, int8 {int8_s * 1e3:7.1f} ms (speed-up {fp32_s / int8_s:.2f}x); "
          f"accuracy fp32 {fp32_score:.4f}, int8 {int8_score:.4f} ({int8_score - fp32_score:+.4f})")


def gnn() -> None:
    data = kk.graphsets.load_planetoid(CORA)
    classes = int(data.y.max()) + 1
    captured = {}
    original = GCN.__init__

    def keep(self, *args, **kwargs):  # gnn_cora.plain builds and trains its own model: keep it
        original(self, *args, **kwargs)
        captured["model"] = self
    GCN.__init__ = keep
    try:
        plain(data, classes, seed=0)
    finally:
        GCN.__init__ = original
    mask = data.test_mask
    compare("GCN (Cora)", captured["model"], lambda m: m(data.x, data.edge_index),
            lambda logits: float((logits.argmax(1)[mask] == data.y[mask]).float().mean()))


def sequences() -> None:
    classes = notebook_classes("sequence_models", "LSTMClassifier", "TransformerClassifier")
    dataset = kk.datasets.temporal(4096, 48, 8, 4, seed=0)
    train_set, val_set = kk.datasets.split(dataset, seed=0)
    x_val, y_val = (torch.stack([val_set[i][k] for i in range(len(val_set))]) for k in (0, 1))
    for name, cls in classes.items():
        torch.manual_seed(0)
        model = cls(8, 48, 4, 48)
        train(model, train_set)
        for recurrent in (False, True) if name == "LSTMClassifier" else (False,):
            compare(name.replace("Classifier", "") + (" (its LSTM in int8 too)" if recurrent else ""), model,
                    lambda m: torch.cat([m(x_val[i:i + 256]) for i in range(0, len(x_val), 256)]),
                    lambda logits: float((logits.argmax(1) == y_val).float().mean()), recurrent)


def classes_for_width(hidden: int = 512) -> nn.Module:
    """The notebook's Transformer at a width where matrix products dominate (speed only: its
    'accuracy' is agreement with its own fp32 predictions)."""
    torch.manual_seed(0)
    cls = notebook_classes("sequence_models", "TransformerClassifier")["TransformerClassifier"]
    return cls(8, hidden, 4, 48).eval()


def train(model: nn.Module, train_set, epochs: int = 10) -> None:
    loader = torch.utils.data.DataLoader(train_set, 64, shuffle=True, generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, 3e-3, epochs=epochs, steps_per_epoch=len(loader))
    model.train()
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            schedule.step()


def main() -> None:
    torch.set_num_threads(min(torch.get_num_threads(), 2))  # a Kaggle CPU session's share
    if CORA.is_dir():
        gnn()
    else:
        print(f"int8_inference: no Cora files at {CORA}; the GNN row is skipped")
    sequences()
    wide = classes_for_width()
    x = torch.randn(256, 48, 8)
    compare("Transformer wide (hidden 512, untrained)", wide, lambda m: m(x),
            lambda logits: float((logits.argmax(1) == wide(x).argmax(1)).float().mean()))
    try:
        kk.int8.quantize(notebook_classes("segmentation_3d", "UNet3D")["UNet3D"](8, 2))
    except kk.int8.Int8Error as refused:
        print(f"U-Net (segmentation_3d): refused, {refused}")


if __name__ == "__main__":
    main()
