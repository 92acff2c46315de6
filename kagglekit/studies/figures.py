"""The write-ups' figures, measured on the machine a notebook runs on, each judged against its target.

For a pipeline's own model and batch (its notebook's cells tagged ``model``, carried in by
``tools.borrow``): one GPU against every GPU at the same global batch (DDP through
``run.launch``), and fp32 against the card's mixed precision, each a short ``kk.fit`` of a
fixed number of steps after a warm-up. A measurement in a GPU's process runs in a forked child
(``launcher.isolated``), so the notebook's process never opens the driver and every later
launch may still fork. On CPU the same paths run with gloo processes and bf16 autocast, and a
figure that needs a GPU is judged "not measurable here", never a pass.
"""
from __future__ import annotations

import datetime
import statistics
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

# The write-ups' targets (kernel metadata may set its own under ``criteria``): the second T4
# gives >= 1.8x; AMP needs <= 0.6 of fp32's memory and loses < 0.5% of the metric; the
# utilisation study's remedies keep the GPU >= 80% busy.
TARGETS = (("scaling", 1.8), ("amp_memory", 0.6), ("amp_accuracy", 0.005), ("gpu_util", 80.0))
PRELUDE = ("import numpy as np\nimport torch\nfrom torch import nn\nfrom torch.nn import functional as F\n"
           "import kagglekit as kk\n")
NOT_HERE = "not measurable here"


def pipeline(entry: dict, kaggle: bool = True) -> types.SimpleNamespace:
    """A borrowed pipeline (``BORROWED[name]``) as a namespace: its parameters (the Kaggle ones,
    or its notebook's defaults) and what its cells tagged ``model`` define, run with them."""
    space = dict(entry["kaggle" if kaggle else "defaults"])
    exec(compile(PRELUDE + entry["source"], "<borrowed model cells>", "exec"), space)  # noqa: S102
    return types.SimpleNamespace(**{k: v for k, v in space.items() if not k.startswith("__")})


@dataclass
class Workload:
    """What one figure trains: a pipeline's model on its data at its global batch."""
    name: str
    build: Callable  # () -> a fresh nn.Module (seeded by the caller)
    train_set: Any  # a map-style dataset
    val_set: Any
    loss_fn: Callable  # kk.fit's loss_fn(model, batch)
    evaluate: Callable  # (loader, device) -> evaluate(model) -> dict, as kk.evaluate's
    metric: str  # the key of evaluate's dict compared across precisions (higher is better)
    per_gpu: int  # the pipeline's batch per GPU
    lr: float = 1e-3

    @property
    def batch_size(self) -> int:
        """The global batch of the scaling runs: the per-GPU batch on Kaggle's two T4s."""
        return 2 * self.per_gpu


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _allreduce_s(model, device, repeats: int = 5) -> float:
    """Seconds one all-reduce of every gradient takes (one flat fp32 buffer, as DDP's buckets)."""
    flat = torch.zeros(sum(p.numel() for p in model.parameters() if p.requires_grad), device=device)
    times = []
    for _ in range(repeats + 1):
        _sync(device)
        started = time.perf_counter()
        dist.all_reduce(flat)
        _sync(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def measure(run, w: Workload, steps: int, warmup: int, precision=None, batch: int | None = None) -> dict:
    """One rank's part of a measurement: ``warmup`` steps, then ``steps`` timed ones, then the
    metric on the validation set; ``batch`` (default the workload's global one) split over the ranks."""
    from ..loop import memory
    from ..loop.train import Monitor, Speed, fit
    from ..parallel.loaders import make_loader
    device, world = run.device, run.world_size
    per_rank = max(1, (batch or w.batch_size) // world)
    torch.manual_seed(0)
    model = w.build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=w.lr)
    loader = make_loader(w.train_set, per_rank, seed=0, device=device)
    common = dict(run=run, speed=Speed(precision=precision), checkpoints=None, progress=False, epochs=10**6,
                  monitor=Monitor(gpu=False))
    fit(model, optimizer, loader, w.loss_fn, max_steps=warmup, **common)  # cuDNN's autotuning
    memory.reset_peak_of(device)
    result = fit(model, optimizer, loader, w.loss_fn, max_steps=steps, **common)
    peak = memory.peak_of(device)
    model.eval()
    with torch.no_grad():
        scores = w.evaluate(make_loader(w.val_set, per_rank, train=False, device=device), device)(model)
    step_s = per_rank * world / result.samples_per_s
    sync_s = _allreduce_s(model, device) if world > 1 else 0.0
    return {"workload": w.name, "processes": world, "precision": result.precision,
            "batch_per_process": per_rank, "samples_per_s": round(result.samples_per_s, 1),
            "peak_memory_mb": peak["peak_mb"], "memory_unit": peak["unit"],
            w.metric: round(float(scores[w.metric]), 4), "metric": w.metric,
            "grad_sync_share": round(min(1.0, sync_s / step_s), 3) if world > 1 else None}


def _alone(run, *args) -> dict:
    """``measure`` in one process (on a GPU: a forked child, so this process never opens it)."""
    from ..parallel.launcher import isolated
    return isolated(run.launch, measure, *args, nprocs=1)


def scaling(run, w: Workload, steps: int, warmup: int, processes: int) -> list[dict]:
    """The workload on one process and on ``processes`` (DDP) at the same global batch; on one
    GPU only the first (nothing to scale to)."""
    one, every = ("1 GPU", f"{processes} GPUs") if run.device.type == "cuda" else \
        ("1 process", f"{processes} gloo processes")
    if processes < 2:
        return [{**_alone(run, w, steps, warmup), "run": one}]
    both = run.launch(measure, w, steps, warmup, nprocs=processes)  # first: before any GPU opens here
    return [{**_alone(run, w, steps, warmup), "run": one}, {**both, "run": every}]


def mixed_precision(device_type: str) -> str:
    """The card's mixed precision ("auto": fp16 on a T4, bf16 from Ampere); CPU autocast: bf16."""
    return "auto" if device_type == "cuda" else "bf16"


def precisions(run, w: Workload, steps: int, warmup: int, device_type: str) -> list[dict]:
    """The workload on one process at its per-GPU batch, in fp32 and in mixed precision, the
    same steps each."""
    return [{**_alone(run, w, steps, warmup, p, w.per_gpu), "run": name}
            for name, p in (("fp32", "fp32"), ("mixed", mixed_precision(device_type)))]


def utilisation(cpu_step, make_gpu_step, cycles: int, **study) -> list[dict]:
    """The utilisation study's strategies (``kk.cycles.study``) on this machine's first device."""
    from ..parallel.launcher import isolated
    from . import cycles as cycles_mod

    def measure_cycles():
        device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        rows = cycles_mod.study(cpu_step, make_gpu_step(device), cycles, device, **study)
        return [{k: r.get(k) for k in ("strategy", "cycles_per_s", "gpu_util_pct", "verdict", "skipped")
                 if r.get(k) is not None or k == "gpu_util_pct"} for r in rows]
    return isolated(measure_cycles)


def provenance(gpus: list) -> dict:
    """What every figure is measured on: device, driver, torch, CUDA, the date."""
    driver = None
    if gpus:
        try:
            import pynvml
            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
        except Exception:  # noqa: BLE001 (NVML missing or refused: the driver stays unnamed)
            driver = "unknown (NVML unavailable)"
    from ..machine.env import cpus
    device = f"{len(gpus)} x {gpus[0].name}" if gpus else f"CPU ({cpus()} cores)"
    return {"device": device, "driver": driver or "none (no GPU)", "torch": torch.__version__,
            "cuda": torch.version.cuda or "none (CPU build)",
            "date": datetime.date.today().isoformat()}


def _pairs(rows: list[dict]) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(r["workload"], {})[r["run"]] = r
    return out


def _ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def summarise(scaled: list[dict], mixed: list[dict], cycles: list[dict]) -> list[dict]:
    """One row per figure: the workload, the figure's name and its value."""
    rows = []
    for name, runs in _pairs(scaled).items():
        one, *many = sorted(runs.values(), key=lambda r: r["processes"])
        every = many[-1] if many else {"samples_per_s": None, "grad_sync_share": None}  # one GPU: not measured
        rows += [{"workload": name, "figure": "scaling", "value": _ratio(every["samples_per_s"], one["samples_per_s"])},
                 {"workload": name, "figure": "grad_sync_share", "value": every["grad_sync_share"]}]
    for name, runs in _pairs(mixed).items():
        fp32, amp = runs["fp32"], runs["mixed"]
        metric = fp32["metric"]
        drop = (fp32[metric] - amp[metric]) / abs(fp32[metric]) if fp32[metric] else None
        values = {"amp_speedup": _ratio(amp["samples_per_s"], fp32["samples_per_s"]),
                  "amp_memory": _ratio(amp["peak_memory_mb"], fp32["peak_memory_mb"]),
                  "amp_accuracy": None if drop is None else round(drop, 4)}
        rows += [{"workload": name, "figure": figure, "value": value} for figure, value in values.items()]
    remedies = [r for r in cycles if r.get("cycles_per_s") and r["strategy"] != "sync"]
    best = max(remedies, key=lambda r: r["cycles_per_s"], default={})
    rows.append({"workload": f"utilisation study ({best.get('strategy', 'none ran')})", "figure": "gpu_util",
                 "value": best.get("gpu_util_pct")})
    return rows


HIGHER = ("scaling", "gpu_util")  # the rest of the targets are ceilings
NEEDS = (("scaling", "two GPUs"), ("amp_memory", "a GPU (its allocator's peak)"),
         ("amp_accuracy", "a GPU (the card's fp16/bf16, not CPU autocast)"), ("gpu_util", "a GPU"))


def judge(rows: list[dict], targets: dict, gpus: int) -> list[dict]:
    """Each figure with its target and verdict: pass / FAIL, "reported" (no target), or
    "not measurable here" with what it needs (never a pass on a machine that cannot show it)."""
    judged = []
    for row in rows:
        figure, value = row["figure"], row["value"]
        target = targets.get(figure)
        missing = dict(NEEDS).get(figure) if gpus < (2 if figure == "scaling" else 1) else None
        if target is None:
            verdict = "reported"
        elif missing or value is None:
            verdict = f"{NOT_HERE} (needs {missing or 'a value'})"
        elif figure in HIGHER:
            verdict = "pass" if value >= target else "FAIL"
        else:
            verdict = "pass" if value <= target else "FAIL"
        sign = ">=" if figure in HIGHER else "<="
        judged.append({**row, "target": None if target is None else f"{sign} {target}", "verdict": verdict})
    return judged


def targets(criteria: str) -> dict:
    """The write-ups' targets, overridden by ``criteria`` (JSON, kernel metadata's)."""
    import json
    chosen = dict(TARGETS)
    given = json.loads(criteria) if criteria else {}
    unknown = sorted(set(given) - set(chosen))
    if unknown:
        raise ValueError(f"criteria names {unknown}: the figures' targets are {sorted(chosen)}")
    return {**chosen, **given}
