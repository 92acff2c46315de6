"""Local run against Kaggle run: metric deltas, times, and the success criteria.

Criteria (from the product's success criteria): a score within 2% of the local
run is fine, over 5% is worth investigating, over 10% is a failure; the run met
its time budget (it finished); GPU utilisation above 70% where measured; no OOM.
"""
from __future__ import annotations

import math
from pathlib import Path

SCORE_WORDS = ("loss", "acc", "dice", "mae", "rmse", "auc", "score", "f1")
FINE, INVESTIGATE, FAIL = 0.02, 0.05, 0.10


def flatten(metrics: dict, prefix: str = "") -> dict:
    """Numeric leaves of metrics.json as dotted keys (config, env and histories left out)."""
    flat = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if key in ("config", "env", "history", "histories", "lstm_history") and not prefix:
            continue
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            flat[name] = float(value)
    return flat


def verdict(relative: float) -> str:
    size = abs(relative)
    if size <= FINE:
        return "fine"
    if size <= INVESTIGATE:
        return "small"
    if size <= FAIL:
        return "investigate"
    return "FAIL"


# Keys that may differ between a local run and its Kaggle run without making them
# different experiments: how long or where they ran, not what they computed.
NOT_THE_EXPERIMENT = frozenset({"force_retrain", "time_budget_s", "save_every_min", "processes"})


def config_differences(local: dict, remote: dict) -> list[str]:
    """"key: local -> kaggle" for every parameter that makes the runs different experiments."""
    keys = sorted((set(local) | set(remote)) - NOT_THE_EXPERIMENT)
    return [f"{k}: {local.get(k)!r} -> {remote.get(k)!r}" for k in keys if local.get(k) != remote.get(k)]


def finished(metrics: dict) -> bool:
    """A run that reached its notebook's last cell (the summary) and was not stopped early."""
    return bool(metrics.get("summary")) and not _stopped_by_budget(metrics)


def compare(local: dict, remote: dict) -> dict:
    """Score deltas, time ratio and the criteria; ``ok`` is False on any failure.

    A like-for-like comparison: runs of different configurations are refused before
    (``config_differences``); here a comparison with no shared score, a run that did not
    finish, or a Kaggle session without the GPUs asked for fails.
    """
    a, b = flatten(local), flatten(remote)
    rows = []
    for key in sorted(set(a) & set(b)):
        if not any(w in key.lower() for w in SCORE_WORDS) or key.endswith(("seconds", "_s")):
            continue
        rel = (b[key] - a[key]) / abs(a[key]) if a[key] else (0.0 if b[key] == 0 else math.inf)
        rows.append({"metric": key, "local": a[key], "kaggle": b[key], "relative": rel,
                     "verdict": verdict(rel)})
    accelerator = remote.get("accelerator", {})
    checks = {
        "a score is shared": bool(rows),
        "scores within 10%": bool(rows) and all(r["verdict"] != "FAIL" for r in rows),
        "both runs finished": finished(local) and finished(remote),
        "finished within the time budget": not _stopped_by_budget(remote),
        "no out-of-memory": all(v == 0 for k, v in b.items() if k.endswith("oom_count")),
        "Kaggle gave the GPUs asked for": accelerator.get("ok") if accelerator else None,
    }
    util = [v for k, v in b.items() if "gpu_util" in k]
    checks["GPU utilisation above 70%"] = (min(util) > 70) if util else None  # None: not measured
    return {"rows": rows, "checks": checks, "ok": all(v is not False for v in checks.values()),
            "wall_seconds": {"local": a.get("wall_seconds"), "kaggle": b.get("wall_seconds")}}


def _stopped_by_budget(metrics: dict) -> bool:
    def walk(obj):
        if isinstance(obj, dict):
            if obj.get("stopped") == "time_budget":
                return True
            return any(walk(v) for v in obj.values())
        if isinstance(obj, list):
            return any(walk(v) for v in obj)
        return False
    return walk(metrics)


def markdown(result: dict, title: str) -> str:
    lines = [f"# {title}", "", "| metric | local | Kaggle | change | verdict |", "| --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        lines.append(f"| {r['metric']} | {r['local']:.4g} | {r['kaggle']:.4g} | "
                     f"{100 * r['relative']:+.1f}% | {r['verdict']} |")
    t = result["wall_seconds"]
    lines += ["", f"Wall time: local {t['local']} s, Kaggle {t['kaggle']} s.", "", "## Criteria", ""]
    for name, ok in result["checks"].items():
        lines.append(f"- {name}: " + ("not measured" if ok is None else "yes" if ok else "**NO**"))
    lines += ["", f"Overall: {'OK' if result['ok'] else 'FAILED'}", ""]
    return "\n".join(lines)


def figure(result: dict):
    from ...run.plots import _pyplot
    plt = _pyplot()
    rows = result["rows"] or [{"metric": "(no shared scores)", "relative": 0.0}]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.5))
    values = [100 * r["relative"] if math.isfinite(r["relative"]) else 0 for r in rows]
    ax.barh([r["metric"] for r in rows], values,
            color=["tab:green" if abs(v) <= 100 * FINE else "tab:orange" if abs(v) <= 100 * FAIL
                   else "tab:red" for v in values])
    for x in (-100 * FAIL, 100 * FAIL):
        ax.axvline(x, color="tab:red", linestyle="--", linewidth=1)
    ax.set(xlabel="Kaggle vs local (%)", title="score changes")
    fig.tight_layout()
    return fig


def write(result: dict, folder: Path, title: str) -> Path:
    from ...state import atomic
    folder.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(folder / "compare.md", markdown(result, title).encode())
    fig = figure(result)
    fig.savefig(folder / "compare.png", dpi=110, bbox_inches="tight")
    return folder / "compare.md"
