"""The seeds' rows of a visit's report: per optimisation of the guide (docs/optimisations.md), its
gain on this card as the checks measured it, read from their verdicts (``gpu_check.py`` writes it
under the checks' table). A row whose check did not run or did not measure it says so: a visit
cut short shows what the next one must measure first."""
from __future__ import annotations

NOT_MEASURED = "not measured this visit"


def _by_check(results: list[dict]) -> dict:
    return {r["check"]: r for r in results}


def _amp(precision: dict) -> str:
    rows = precision.get("rows") or []
    return ", ".join(f"{r['workload']} x{r['fp16_speedup']}" for r in rows) or NOT_MEASURED


def _gnn(optimisations: dict, switch: str, what: str) -> str:
    ratio = optimisations.get("gnn", {}).get("against_none", {}).get(switch, {}).get(what)
    return NOT_MEASURED if ratio is None else f"x{ratio} {'step time' if what == 'step' else what}"


def rows(results: list[dict]) -> list[tuple[str, str, str]]:
    """(optimisation, what this card measured against the same work without it, which check)."""
    found = _by_check(results)
    precision, graphs = found.get("precision", {}), found.get("graphs", {})
    opt = found.get("optimisations", {})
    cudnn, pinned = opt.get("cudnn_benchmark", {}), opt.get("pinned_non_blocking", {})
    nccl = found.get("nccl", {})
    return [
        ("mixed precision (fp16 + GradScaler), samples/s", _amp(precision), "precision"),
        ("CUDA graphs, the utilisation study's cycles/s",
         f"x{graphs['graph_over_sync']}" if graphs.get("graph_over_sync") else NOT_MEASURED, "graphs"),
        ("torch.compile, the GNN's step", _gnn(opt, "compile", "step"), "optimisations"),
        ("cuDNN autotuning, the U-Net's step", f"x{cudnn['gain']} faster" if cudnn else NOT_MEASURED,
         "optimisations"),
        ("pinned memory with non_blocking, a U-Net batch's copy and step",
         f"x{pinned['gain']} faster" if pinned else NOT_MEASURED, "optimisations"),
        ("neighbour sampling in a loader worker, the GNN loop's wait", _gnn(opt, "sampling in 1 worker", "wait"),
         "optimisations"),
        ("gradient accumulation 2, the GNN's step", _gnn(opt, "accumulate=2", "step"), "optimisations"),
        ("activation checkpointing, the GNN's peak memory", _gnn(opt, "grad_checkpointing", "memory"),
         "optimisations"),
        ("the second GPU", "one card lent: two NCCL ranks cannot run" if nccl else NOT_MEASURED, "nccl"),
    ]


def table(results: list[dict]) -> list[str]:
    lines = ["| optimisation | on this card, against the same work without it | check |", "| --- | --- | --- |"]
    return lines + [f"| {name} | {value} | {check} |" for name, value, check in rows(results)]
