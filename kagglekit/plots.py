"""Figures every run leaves in its output folder (matplotlib, headless)."""
from __future__ import annotations


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # no display on Kaggle batch runs or CI
    import matplotlib.pyplot as plt
    return plt


def learning_curves(history: list[dict], title: str = "learning curves"):
    """Train/validation losses per epoch, and every other recorded score on a second axis."""
    plt = _pyplot()
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
    ax_score.set(xlabel="epoch", title="validation scores" if scores else "learning rate")
    if not scores:
        ax_score.plot(epochs, [h["lr"] for h in history], marker="o", label="lr")
    for ax in (ax_loss, ax_score):
        if ax.lines:
            ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def bar_table(rows: list[dict], label: str, values: list[str], title: str = ""):
    """One bar chart per value column, bars labelled by ``label``; a column without any
    value (GPU figures on a CPU run) gets no panel rather than an empty one."""
    plt = _pyplot()
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
