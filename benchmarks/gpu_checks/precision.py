"""fp32 against fp16 (the T4's mixed precision; KAGGLEKIT_AS=t4) on the pipelines' own models at
their Kaggle shapes: samples/s and the allocator's peak memory, for the U-Net, the sequence models
and a GCN; what precision="auto" chooses for each (the fit's own probe, ``loop/probe.py``, run on
the card), which must be the faster one of the pair unless the two are within its margin; and
NVML's utilisation beside nvidia-smi's over the same seconds."""
from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time

from common import REPO, card, main, peak_mb

os.environ["KAGGLEKIT_AS"] = "t4"
STEPS, WARMUP = 12, 3


def _measure_everything():
    """The probe measures fits of any length here (its MIN_STEPS spares short fits elsewhere)."""
    from kagglekit.loop import probe
    probe.MIN_STEPS = 1


def _borrowed(name):
    import kagglekit as kk
    from kagglekit.tools import borrow
    return kk.figures.pipeline(borrow.pipeline(name, REPO / "notebooks", REPO / "kernel-metadata"))


def _workloads():
    """(name, build model, one batch, loss_fn) at each pipeline's Kaggle shapes."""
    import torch
    from torch.nn import functional as F
    from torch_geometric.nn import GCNConv

    import kagglekit as kk
    seg, seq = _borrowed("segmentation_3d"), _borrowed("sequence_models")
    p, b = seg.patch, seg.batch_size or 4  # 0 in the Kaggle recipe (sized on the card): the pair at the 4 fp32 holds
    patches = (torch.rand(b, 1, p, p, p), torch.randint(0, 3, (b, 1, p, p, p)).to(torch.uint8))
    sequences = (torch.randn(seq.batch_size, seq.length, seq.features), torch.randint(0, 4, (seq.batch_size,)))

    class GCN(torch.nn.Module):
        def __init__(self, features, hidden, classes):
            super().__init__()
            self.first, self.second = GCNConv(features, hidden), GCNConv(hidden, classes)

        def forward(self, x, edge_index):
            return self.second(F.relu(self.first(x, edge_index)), edge_index)
    graph = kk.graphsets.synthetic(50_000, seed=0)
    node_batch = (graph.x, graph.edge_index, graph.y.clamp(min=0))
    classify = kk.supervised(F.cross_entropy)
    return [("U-Net (segmentation_3d)", lambda: seg.UNet3D(seg.width, seg.depth), patches,
             lambda m, bt: seg.surface_loss(m(bt[0]), bt[1])),
            ("LSTM (sequence_models)", lambda: seq.LSTMClassifier(seq.features, seq.hidden, 4, seq.length),
             sequences, classify),
            ("Transformer (sequence_models)",
             lambda: seq.TransformerClassifier(seq.features, seq.hidden, 4, seq.length), sequences, classify),
            ("GCN (50k nodes)", lambda: GCN(graph.num_features, 256, 2), node_batch,
             lambda m, bt: F.cross_entropy(m(bt[0], bt[1]), bt[2]))]


def _measure(build, batch, loss_fn, precision: str) -> dict:
    import torch

    import kagglekit as kk
    device = card()
    torch.manual_seed(0)
    model = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    moved = kk.loaders.to_device(batch, device)
    common = dict(run=kk.Alone(device=device, precision="auto"), speed=kk.Speed(precision=precision),
                  progress=False, monitor=kk.Monitor(gpu=False), epochs=10**6)
    first = kk.fit(model, optimizer, [moved], loss_fn, max_steps=WARMUP, **common)  # auto: the probe runs here
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    result = kk.fit(model, optimizer, [moved], loss_fn, max_steps=STEPS, **common)
    torch.cuda.synchronize(device)
    rows = kk.batches.batch_size(moved)
    return {"samples_per_s": round(STEPS * rows / (time.perf_counter() - started), 1),
            "peak_mb": peak_mb(device), "precision": result.precision,
            "probe": first.precision_probe if precision is None else {}}


def _agrees(chosen: str | None, speedup: float) -> bool:
    """The probe's choice is the faster of the pair measured beside it, or the two are within
    the probe's margin (and noise) of each other."""
    from kagglekit.loop import probe
    if chosen is None:
        return False
    if abs(speedup - (1 + probe.MARGIN)) < 0.1:
        return True
    return chosen == ("fp16" if speedup > 1 + probe.MARGIN else "fp32")


def _nvidia_smi(samples: list, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        done = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                               "-i", "0"], capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip().isdigit():
            samples.append(int(done.stdout.strip()))


def check():
    import kagglekit as kk
    _measure_everything()
    rows = []
    smi, stop = [], threading.Event()
    watcher = threading.Thread(target=_nvidia_smi, args=(smi, stop), daemon=True)
    with kk.monitor.GPUSampler(interval_s=0.5) as nvml:
        watcher.start()
        for name, build, batch, loss_fn in _workloads():
            fp32, fp16, auto = (_measure(build, batch, loss_fn, p) for p in ("fp32", "fp16", None))
            speedup = round(fp16["samples_per_s"] / fp32["samples_per_s"], 2)
            rows.append({"workload": name, "fp32": fp32, "fp16": fp16, "fp16_speedup": speedup,
                         "fp16_memory": round(fp16["peak_mb"] / fp32["peak_mb"], 2),
                         "auto_chose": auto["probe"].get("chosen"), "auto_why": auto["probe"].get("why"),
                         "auto_agrees": _agrees(auto["probe"].get("chosen"), speedup)})
        stop.set()
    utilisation = {"nvml_mean_pct": nvml.summary().get("util_mean"),
                   "nvidia_smi_mean_pct": round(statistics.mean(smi), 1) if smi else None}
    ok = all(r["fp16"]["precision"] == "fp16" and r["auto_agrees"] for r in rows) \
        and utilisation["nvml_mean_pct"] is not None
    return ok, {"rows": rows, "utilisation": utilisation}


if __name__ == "__main__":
    main(check)
