"""What a run leaves for a person: metrics.json, plots inline and on disk, tables, the summary.

``Run`` (``context``) holds one and hands its methods on (``run.log``, ``run.summary``, ...).
They write only from the notebook's own process (a launched rank returns what it measured, and
the notebook logs it), so metrics.json has one writer and nothing a rank wrote is lost under the
parent's next write.
"""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..machine import display, env as env_mod, packages
from ..state import atomic


@dataclass
class Report:
    """metrics.json and the plots of one run, in ``output_dir`` (``Run.report``)."""
    name: str  # the notebook's
    config: dict
    env: env_mod.EnvReport
    output_dir: Path
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # this kernel run
    metrics: dict = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    previous: dict = field(default_factory=dict, repr=False)  # metrics.json of the last run here
    chain: dict = field(default_factory=dict)  # what each fit and cache entry did this session
    pid: int = field(default_factory=os.getpid, repr=False)  # the notebook's process

    def log(self, **metrics) -> None:
        """Add facts to metrics.json (written at once, atomically)."""
        if os.getpid() != self.pid:
            raise RuntimeError("run.log() inside a launched process: return what you measured "
                               "from the launched function and log it in the notebook")
        self.metrics.update(metrics)
        self.save_metrics()

    def log_fit(self, label: str, result, step_plot: bool = True, curves: bool | str = True) -> None:
        """A fit's summary into metrics.json under ``label`` (its epochs' records under
        ``<label>.history``), and its plots.

        ``<label>_learning_curves.png``: losses and validation scores per epoch (``curves``: its
        title, default ``label``; False: none); ``<label>_step_time.png``: where a step's time
        goes (sampled phases; pass ``step_plot=False`` to draw several fits side by side with
        ``plots.step_breakdown`` instead); ``<label>_gpu.png``: utilisation and memory per GPU
        over time (on GPU). ``result``: a FitResult, or its ``summary()`` (what launched ranks
        send back).
        """
        from . import plots
        summary = dict(result.summary() if hasattr(result, "summary") else result)
        self.chain[label] = what_it_did(summary, self.session)
        if not summary.get("steps") and summary.get("stopped") != "already_complete":
            self.note(f"{label}: 0 training steps ({summary.get('stopped', 'not trained')}): its results are "
                      "the untrained model's")
        if (summary.get("scaler") or {}).get("healthy") is False:
            self.note(f"{label}: fp16's scaler was unhealthy: {summary['scaler']['why']}")
        timeline = summary.pop("gpu_timeline", None) or []
        earlier = self.previous.get(label)
        if summary.get("stopped") == "already_complete" and earlier:
            # A rerun that skipped training measured nothing: keep the figures of the run
            # that trained (speed, step breakdown, diagnosis), not zeros over them.
            summary = {**earlier, "stopped": "already_complete", "skipped_rerun": True,
                       "steps_this_session": 0, "resumed_from": summary.get("resumed_from"),
                       "history": summary.get("history") or earlier.get("history")}
        self.log(**{label: summary}, chain=self.chain)
        if curves is not False and summary.get("history"):
            title = curves if isinstance(curves, str) else label
            self.savefig(plots.learning_curves(summary["history"], title=title), f"{label}_learning_curves")
        if step_plot and summary.get("step_breakdown", {}).get("sampled_steps"):
            self.savefig(plots.step_breakdown({label: summary["step_breakdown"]}),
                         f"{label}_step_time")
        if timeline:
            self.savefig(plots.gpu_timeline(timeline), f"{label}_gpu")

    def note(self, *said: str) -> None:
        """What the run dropped, skipped or decided on the way (a column test.csv lacks, a search
        trial that failed, a fit of 0 steps): printed now, kept in metrics.json (``notes``),
        shown beside the headline results, and printed by ``make run`` after them."""
        notes = self.metrics.setdefault("notes", [])
        fresh = [s for s in said if s and s not in notes]
        for text in fresh:
            print(f"kagglekit note: {text}", flush=True)
        if fresh:
            notes += fresh
            self.save_metrics()

    def save_metrics(self) -> Path:
        path = self.output_dir / "metrics.json"
        payload = {"notebook": self.name, "config": self.config, "env": self.env.as_dict(),
                   "wall_seconds": round(time.time() - self.started, 3), **self.metrics}
        atomic.write_json(path, payload)
        return path

    def savefig(self, fig, name: str) -> None:
        """Save a matplotlib figure as ``<output>/<name>.png``, show it inline, close it.

        Returns nothing, so a cell ending with it shows the figure, not a path."""
        save_figure(fig, self.output_dir / f"{name}.png")

    def table(self, rows: list[dict], digits: int = 4) -> None:
        """Show ``rows`` as a table (HTML in a notebook)."""
        display.show_table(rows, digits)

    def summary(self, headlines: list[dict]) -> None:
        """The closing cell: each headline result beside its baseline and criterion,
        with a pass/fail mark (``display.headline`` makes the rows); into metrics.json too."""
        self.log(summary=headlines, packages=packages.record())  # what this version really ran
        display.show_markdown(display.summary_markdown(headlines, self.metrics.get("notes", [])))
        display.show_table([{"result": h["result"], "value": h["value"],
                             "baseline": f"{h['vs']} {h['baseline']:.4g}" if h["baseline"] is not None else "",
                             "criterion": h["criterion"],
                             "pass": {True: "yes", False: "NO", None: ""}[h["passed"]]}
                            for h in headlines])



def what_it_did(summary: dict, session: str) -> str:
    """How a fit's result came to be in this session: the kernel-version chain's record.

    "trained" (from step 0), "resumed" (from a checkpoint), "skipped" (a finished
    checkpoint), "cached" (a summary computed in an earlier session, from the cache),
    "unsaved" (trained without checkpoints: a measurement, nothing to resume).
    """
    if summary.get("session") and session and summary["session"] != session:
        return "cached"
    if summary.get("stopped") == "already_complete":
        return "skipped"
    if summary.get("resumed_from"):
        return "resumed"
    return "trained" if summary.get("checkpoint") else "unsaved"


def save_figure(fig, path: Path) -> Path:
    """Write ``fig`` as a PNG atomically, show it inline in a notebook, close it
    (closing keeps a long notebook's memory flat)."""
    import matplotlib.pyplot as plt
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    display.show_png(path)
    return path
