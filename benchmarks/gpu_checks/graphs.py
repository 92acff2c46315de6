"""CUDA-graph capture and replay under fp16 with the GradScaler (as on a T4: KAGGLEKIT_AS=t4):
the graphed fit ends where the eager one does; and the gpu_utilization study's own loop,
synchronous against graph replay (the write-up hoped for about 2x)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from common import REPO, card, main

os.environ["KAGGLEKIT_AS"] = "t4"


def _fit(graphs: str):
    import torch

    import kagglekit as kk
    torch.manual_seed(0)
    model = kk.models.MLP(64, 256, 8, depth=3)
    data = kk.datasets.tabular(2048, features=64, classes=8, seed=0)
    loader = kk.make_loader(data, 64, num_workers=0, device=card())
    result = kk.fit(model, torch.optim.AdamW(model.parameters(), lr=1e-3), loader,
                    kk.supervised(torch.nn.functional.cross_entropy), run=kk.Alone(device=card()), epochs=2,
                    progress=False, speed=kk.Speed(cuda_graphs=graphs), monitor=kk.Monitor(gpu=False))
    return model.state_dict(), result


def _cycles() -> dict:
    import kagglekit as kk
    from kagglekit.tools import borrow
    entry = borrow.pipeline("gpu_utilization", REPO / "notebooks", REPO / "kernel-metadata")
    study = kk.figures.pipeline(entry, kaggle=True)
    device = card()
    gpu_step = study.make_gpu_step(device)
    rates = {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-cycles-") as folder:
        for strategy in ("sync", "cuda_graph"):
            row = kk.cycles.run(strategy, study.cpu_step, gpu_step, 400, device,
                                graph_cycles=50, folder=Path(folder) / strategy)
            rates[strategy] = row.get("cycles_per_s") or row.get("skipped")
    return rates


def check():
    import torch
    eager, plain = _fit("off")
    graphed, replayed = _fit("strict")
    close = all(torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-3)
                for a, b in zip(eager.values(), graphed.values()))
    rates = _cycles()
    ratio = rates["cuda_graph"] / rates["sync"] if all(isinstance(v, float) for v in rates.values()) else None
    facts = {"precision": replayed.precision, "graphs": replayed.cuda_graphs, "same_as_eager": close,
             "cycles_per_s": rates, "graph_over_sync": None if ratio is None else round(ratio, 2)}
    return close and replayed.precision == "fp16" and ratio is not None, facts


if __name__ == "__main__":
    main(check)
