"""Figures every run leaves in its output folder (matplotlib, headless)."""
from __future__ import annotations


def pyplot():
    import matplotlib
    matplotlib.use("Agg")  # no display on Kaggle batch runs or CI
    import matplotlib.pyplot as plt
    return plt


def learning_curves(history: list[dict], title: str = "learning curves"):
    """Train/validation losses per epoch, and every other recorded score on a second axis."""
    plt = pyplot()
    fig, (ax_loss, ax_score) = plt.subplots(1, 2, figsize=(10, 3.6))
    epochs = [h["epoch"] + 1 for h in history]
    for key in [k for k in history[0] if k.endswith("loss")] if history else []:
        ax_loss.plot(epochs, [h.get(key) for h in history], marker="o", label=key)
    ax_loss.set(xlabel="epoch", ylabel="loss", title=title)
    scores = [k for k in (history[0] if history else {})
              if k not in ("epoch", "step", "lr", "seconds", "samples_per_s")
              and not k.endswith("loss")]
    for key in scores:
        ax_score.plot(epochs, [h.get(key) for h in history], marker="o", label=key)
    rates = not scores and history and "lr" in history[0]
    ax_score.set(xlabel="epoch", title="validation scores" if scores else "learning rate" if rates else "")
    if rates:
        ax_score.plot(epochs, [h.get("lr") for h in history], marker="o", label="lr")
    for ax in (ax_loss, ax_score):
        if ax.lines:
            ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def bar_table(rows: list[dict], label: str, values: list[str], title: str = ""):
    """One bar chart per value column, bars labelled by ``label``; a column without any
    value (GPU figures on a CPU run) gets no panel rather than an empty one."""
    plt = pyplot()
    values = [v for v in values if any(r.get(v) is not None for r in rows)] or values[:1]
    fig, axes = plt.subplots(1, len(values), figsize=(3.6 * len(values), 3.4), squeeze=False)
    names = [str(r[label]) for r in rows]
    for ax, key in zip(axes[0], values):
        ax.bar(names, [r.get(key) or 0 for r in rows], color="tab:blue")
        ax.set_title(key)
        ax.tick_params(axis="x", rotation=30)
        ax.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def gpu_timeline(gpu_samples: list[dict]):
    """Utilisation and memory over time, one line per GPU."""
    plt = pyplot()
    fig, (ax_u, ax_m) = plt.subplots(1, 2, figsize=(10, 3.4))
    for g in sorted({s["gpu"] for s in gpu_samples}):
        rows = [s for s in gpu_samples if s["gpu"] == g]
        ax_u.plot([r["t"] for r in rows], [r["util"] for r in rows], label=f"GPU {g}")
        ax_m.plot([r["t"] for r in rows], [r["mem_used_mb"] for r in rows], label=f"GPU {g}")
    ax_u.set(xlabel="s", ylabel="%", title="utilisation", ylim=(0, 100))
    ax_m.set(xlabel="s", ylabel="MB", title="memory used")
    for ax in (ax_u, ax_m):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.tight_layout()
    return fig


def step_breakdown(rows: dict[str, dict]):
    """Stacked median step time per phase, one bar per run (``{label: breakdown}``)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(rows)), 3.6))
    bottom = [0.0] * len(rows)
    labels = list(rows)
    from ..loop.monitor import PHASES
    for phase in PHASES:
        values = [1000 * rows[k].get("median_s", {}).get(phase, 0) for k in labels]
        ax.bar(labels, values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(ylabel="ms per step (median)", title="where a step's time goes")
    ax.legend()
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    return fig


def memory_curves(curves: dict[str, list[float]], ylabel: str = "MB"):
    """Memory per cycle, one line per run (``{label: [MB per cycle]}``)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    for label, curve in curves.items():
        ax.plot(curve, label=label)
    ax.set(xlabel="cycle", ylabel=ylabel, title="memory with and without savepoints")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def pr_curves(scores: dict, labels, title: str = "test precision-recall"):
    """Precision-recall curves of ``{name: scores}`` against the same ``labels``, each with its PR-AUC."""
    from ..score import metrics
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, model_scores in scores.items():
        precision, recall = metrics.pr_curve(model_scores, labels)
        ap = metrics.average_precision(model_scores, labels)
        ax.plot(recall, precision, drawstyle="steps-post", label=f"{name} (PR-AUC {ap:.3f})")
    ax.set(xlabel="recall", ylabel="precision", title=title, ylim=(0, 1.02))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def forecasts(panels: list[dict], title: str = "test forecasts"):
    """One panel per series: its recent ``history``, the ``truth`` after the forecast
    origin (None past the end of the data), and each model's forecast (``forecasts``: name ->
    values)."""
    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.6 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        ahead = range(len(next(iter(panel["forecasts"].values()))))
        ax.plot(range(-len(panel["history"]), 0), panel["history"], color="0.6", linewidth=1,
                label="history")
        if panel.get("truth") is not None:
            ax.plot(ahead, panel["truth"], color="black", linewidth=2, label="truth")
        for name, values in panel["forecasts"].items():
            ax.plot(ahead, values, label=name, alpha=0.85)
        ax.axvline(0, color="0.6", linestyle=":")
        ax.set_title(panel["title"], fontsize=10)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(ncol=4, fontsize=8)
    axes[-1, 0].set_xlabel("steps from the forecast origin")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def hill_climb(steps: list[dict], weights: dict, best_single: float, metric: str, title: str = "hill climbing"):
    """The climb's CV after each step against the best single model's (dashed), and the final
    weights (negative ones in red)."""
    plt = pyplot()
    fig, (ax_cv, ax_w) = plt.subplots(1, 2, figsize=(11, 3.8))
    ax_cv.plot(range(len(steps)), [s["score"] for s in steps], marker="o", label="hill climb")
    for k, s in enumerate(steps):
        ax_cv.annotate(f"{s['model']} {s['weight']:+.2f}", (k, s["score"]), fontsize=7, rotation=20)
    ax_cv.axhline(best_single, ls="--", color="gray", label="best single model")
    ax_cv.set(xlabel="step", ylabel=f"CV {metric}", title=title)
    ax_cv.legend()
    names = list(weights)
    ax_w.barh(names, [weights[n] for n in names], color=["tab:red" if weights[n] < 0 else "tab:blue" for n in names])
    ax_w.axvline(0, color="black", lw=0.8)
    ax_w.set(title="weights (sum to 1)")
    for ax in (ax_cv, ax_w):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def importance(shares: dict, top: int = 20):
    """Feature importance (share of the gain) of each model, its ``top`` features, side by side."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(shares), figsize=(4.2 * len(shares), 0.3 * top + 1.5), squeeze=False)
    for ax, (model, values) in zip(axes[0], shares.items()):
        names = list(values)[:top][::-1]
        ax.barh(names, [values[n] for n in names], color="tab:green")
        ax.set(title=model, xlabel="share of gain")
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
