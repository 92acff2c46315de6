"""Local run against Kaggle run: metric deltas, and the write-up's criteria, one verdict each.

Each criterion ends in ``success``, ``acceptable`` (between success and investigate),
``investigate``, ``fail`` or ``not measured``, with its reason; the comparison's verdict is the
worst of them. The thresholds are the write-up's (``CRITERIA``); a notebook's kernel metadata
may set its own under ``criteria`` (the GNN's headline target: PR-AUC >= 0.80, floor 0.70):

- ran to the end: no summary (a crash) fails; stopped at the time budget is to investigate;
- headline metric (the summary's first result) against ``target`` (success) and ``floor``
  (under it: fail); between them: investigate;
- its difference from the local run: under 2% success, past 5% investigate, past 10% fail;
- the Kaggle run's wall time: under 70 minutes success, past 90 investigate;
- GPU utilisation: above 70% success, under 50% investigate; no GPU seen fails;
- out-of-memory events fail; mixed-precision events (an fp16 overflow rolled back) investigate,
  and so does an fp16 scaler whose scale collapsed or that skipped many steps (a fit's
  ``scaler.healthy``: ``loop.scalerhealth``).
"""
from __future__ import annotations

import math
from pathlib import Path

CRITERIA = {"target": None, "floor": None, "higher_is_better": True,
            "difference": [0.02, 0.05, 0.10], "minutes": [70, 90], "gpu_util": [70, 50]}
ORDER = ["success", "not measured", "acceptable", "investigate", "fail"]
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


def compare(local: dict, remote: dict, criteria: dict | None = None) -> dict:
    """Score deltas (every shared score, for reading) and the criteria's verdicts.

    A like-for-like comparison: runs of different configurations are refused before
    (``config_differences``). ``ok`` is False when any criterion fails.
    """
    rules = {**CRITERIA, **(criteria or {})}
    a, b = flatten(local), flatten(remote)
    rows = []
    for key in sorted(set(a) & set(b)):
        if not any(w in key.lower() for w in SCORE_WORDS) or key.endswith(("seconds", "_s")):
            continue
        rel = (b[key] - a[key]) / abs(a[key]) if a[key] else (0.0 if b[key] == 0 else math.inf)
        rows.append({"metric": key, "local": a[key], "kaggle": b[key], "relative": rel,
                     "verdict": verdict(rel)})
    judged = [_ran(remote), _headline(remote, rules), _difference(local, remote, rules),
              _minutes(remote, rules), _gpus(remote, b, rules), _oom(b), _precision(remote), _scaler(remote)]
    worst = max((c["verdict"] for c in judged), key=ORDER.index)
    return {"rows": rows, "criteria": judged, "verdict": worst, "ok": worst != "fail",
            "wall_seconds": {"local": a.get("wall_seconds"), "kaggle": b.get("wall_seconds")},
            "speedup": speedup(local, remote)}


def _device(metrics: dict) -> str:
    env = metrics.get("env", {})
    return env.get("gpu_summary") if env.get("gpus") else f"CPU ({env.get('cpus', '?')} cores)"


def speedup(local: dict, remote: dict) -> dict:
    """How much faster the Kaggle run trained than the local one: per fit (samples/s of the
    session that trained it, Kaggle over local) and overall (wall time, local over Kaggle),
    with each side's device named."""
    fits = []
    for name in sorted(set(local) & set(remote)):
        a, b = local[name], remote[name]
        if not (isinstance(a, dict) and isinstance(b, dict) and "samples_per_s" in a and "samples_per_s" in b):
            continue
        ratio = b["samples_per_s"] / a["samples_per_s"] if a["samples_per_s"] else None
        fits.append({"fit": name, "local": a["samples_per_s"], "kaggle": b["samples_per_s"], "speedup": ratio})
    wall = local.get("wall_seconds"), remote.get("wall_seconds")
    return {"fits": fits, "overall": wall[0] / wall[1] if wall[0] and wall[1] else None,
            "devices": {"local": _device(local), "kaggle": _device(remote)}}


def _judge(name: str, verdict: str, reason: str) -> dict:
    return {"criterion": name, "verdict": verdict, "reason": reason}


def _ran(remote: dict) -> dict:
    if not remote.get("summary"):
        return _judge("ran to the end", "fail", "no summary: the Kaggle run crashed or stopped before "
                                                "its last cell (make logs shows where)")
    if _stopped_by_budget(remote):
        return _judge("ran to the end", "investigate", "a fit stopped at the time budget")
    return _judge("ran to the end", "success", "reached the summary")


def _head(metrics: dict):
    summary = metrics.get("summary") or [{}]
    value = summary[0].get("value")
    return (summary[0].get("result", "headline"), value) if isinstance(value, (int, float)) else (None, None)


def _headline(remote: dict, rules: dict) -> dict:
    name, value = _head(remote)
    if value is None:
        return _judge("headline metric", "fail" if rules["target"] is not None else "not measured",
                      "the Kaggle run has no headline value")
    if rules["target"] is None:
        return _judge(f"headline metric ({name})", "not measured", f"{value:.4g}; no target set")
    sign = 1 if rules["higher_is_better"] else -1
    floor = rules["floor"] if rules["floor"] is not None else rules["target"]
    if sign * value >= sign * rules["target"]:
        return _judge(f"headline metric ({name})", "success", f"{value:.4g} reaches {rules['target']:g}")
    if sign * value < sign * floor:
        return _judge(f"headline metric ({name})", "fail", f"{value:.4g} is under the floor {floor:g}")
    return _judge(f"headline metric ({name})", "investigate",
                  f"{value:.4g} misses {rules['target']:g} (floor {floor:g})")


def _difference(local: dict, remote: dict, rules: dict) -> dict:
    (_, mine), (_, theirs) = _head(local), _head(remote)
    if mine is None or theirs is None:
        return _judge("difference from the local run", "not measured", "a run has no headline value")
    rel = abs(theirs - mine) / abs(mine) if mine else (0.0 if theirs == mine else math.inf)
    fine, look, fail = rules["difference"]
    verdict = "fail" if rel > fail else "investigate" if rel > look else "acceptable" if rel > fine else "success"
    return _judge("difference from the local run", verdict,
                  f"{100 * rel:.1f}% ({mine:.4g} local, {theirs:.4g} Kaggle; success under "
                  f"{100 * fine:g}%, investigate past {100 * look:g}%, fail past {100 * fail:g}%)")


def _minutes(remote: dict, rules: dict) -> dict:
    seconds = remote.get("wall_seconds")
    if not isinstance(seconds, (int, float)):
        return _judge("wall time", "not measured", "no wall_seconds in the Kaggle run")
    fast, slow = rules["minutes"]
    minutes = seconds / 60
    verdict = "investigate" if minutes > slow else "acceptable" if minutes >= fast else "success"
    return _judge("wall time", verdict, f"{minutes:.1f} min (success under {fast}, investigate past {slow})")


def _gpus(remote: dict, flat: dict, rules: dict) -> dict:
    accelerator = remote.get("accelerator", {})
    if accelerator and not accelerator.get("ok"):
        return _judge("GPUs", "fail", f"Kaggle gave {accelerator.get('found') or 'no GPU'}, not the GPUs asked for")
    if not accelerator and not remote.get("env", {}).get("gpus", True):
        return _judge("GPUs", "fail", "no GPU seen")
    util = [v for k, v in flat.items() if "gpu_util" in k]
    if not util:
        return _judge("GPU utilisation", "not measured",
                      "no utilisation sampled")
    good, poor = rules["gpu_util"]
    low = min(util)
    verdict = "investigate" if low < poor else "acceptable" if low <= good else "success"
    return _judge("GPU utilisation", verdict, f"{low:.0f}% at the lowest (success above {good}%, "
                                              f"investigate under {poor}%)")


def _oom(flat: dict) -> dict:
    count = sum(v for k, v in flat.items() if k.endswith("oom_count"))
    return _judge("out of memory", "fail" if count else "success", f"{int(count)} out-of-memory events")


def _scaler(remote: dict) -> dict:
    """fp16's GradScaler in every fit of the Kaggle run: a collapsed scale or many skipped steps."""
    fits = {k: v["scaler"] for k, v in remote.items() if isinstance(v, dict) and v.get("scaler")}
    if not fits:  # fp32 or bf16: no scale to collapse, nothing to judge against the run
        return _judge("fp16 scaler", "success", "no fit trained with a GradScaler (fp32 or bf16)")
    sick = {k: s["why"] for k, s in fits.items() if s.get("healthy") is False}
    if sick:
        return _judge("fp16 scaler", "investigate", "; ".join(f"{k}: {why}" for k, why in sick.items()))
    return _judge("fp16 scaler", "success", f"{len(fits)} fits: " + ", ".join(
        f"{k} lowest scale {s['lowest_scale']:.3g}, {s['skipped_steps']} skipped" for k, s in fits.items()))


def _precision(remote: dict) -> dict:
    events = []

    def walk(obj):
        if isinstance(obj, dict):
            events.extend(obj.get("precision_events") or [])
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)
    walk(remote)
    if events:
        return _judge("mixed precision", "investigate", f"{len(events)} precision events, e.g. {events[0]}")
    return _judge("mixed precision", "success", "no precision event")


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
    t, fast = result["wall_seconds"], result.get("speedup", {"fits": [], "devices": {}})
    lines += ["", f"Wall time: local {t['local']} s, Kaggle {t['kaggle']} s.", ""]
    if fast["fits"] or fast.get("overall"):
        devices = fast["devices"]
        lines += [f"## Speed-up of Kaggle ({devices.get('kaggle')}) over local ({devices.get('local')})", "",
                  "| fit | local samples/s | Kaggle samples/s | speed-up |", "| --- | --- | --- | --- |"]
        lines += [f"| {f['fit']} | {f['local']:.4g} | {f['kaggle']:.4g} | {_times(f['speedup'])} |"
                  for f in fast["fits"]]
        lines += ["", f"Overall (wall time): {_times(fast.get('overall'))}", ""]
    lines += ["## Criteria", "",
              "| criterion | verdict | why |", "| --- | --- | --- |"]
    for c in result["criteria"]:
        mark = f"**{c['verdict'].upper()}**" if c["verdict"] in ("fail", "investigate") else c["verdict"]
        lines.append(f"| {c['criterion']} | {mark} | {c['reason']} |")
    lines += ["", f"Overall: {result['verdict'].upper()}", ""]
    return "\n".join(lines)


def _times(ratio) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def figure(result: dict):
    from ...run.plots import pyplot
    plt = pyplot()
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
