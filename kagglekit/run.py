"""``start``: the first call of every notebook.

It validates the parameters, prints the environment report, seeds everything,
picks the output folder, and returns a ``Run`` that collects metrics.json and
the plots of the run in that one folder.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import atomic, display, env, inputs, params, policy as policy_mod, ranklog, ranks
from .checkpoint import CheckpointManager


class DataDirError(FileNotFoundError):
    """``data_dir`` does not exist or lacks the files a pipeline needs."""


@dataclass
class Run:
    name: str
    config: dict
    output_dir: Path
    env: env.EnvReport
    seed: int = 0
    metrics: dict = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    _cache: object = field(default=None, repr=False)
    previous: dict = field(default_factory=dict, repr=False)  # metrics.json of the last run here
    policy: policy_mod.Policy | None = field(default=None, repr=False)  # what every fit follows
    chain: dict = field(default_factory=dict)  # what each fit and cache entry did this session

    @property
    def precision(self):
        return self.env.precision

    @property
    def device(self):
        """This process's device (``ranks.default_device``: cuda:0 where there is a GPU)."""
        return ranks.default_device()

    @property
    def cache(self):
        """This run's result cache (``force_retrain`` recomputes every entry)."""
        if self._cache is None:
            self._cache = self.policy.cache()
        return self._cache

    def cached(self, name: str, config: dict, fn, *, data=None, code=None):
        """``fn()``'s result for (config, data, code), from the cache when it is there;
        hits, misses and time saved go to metrics.json."""
        hits = self.cache.stats()["hits"]
        value = self.cache.get(name, config, fn, data=data, code=code)
        stats = self.cache.stats()
        self.chain[f"cache:{name}"] = "hit" if stats["hits"] > hits else "computed"
        self.log(cache=stats, chain=self.chain)
        return value

    def checkpoints(self, name: str = "model", **kwargs) -> CheckpointManager:
        """A CheckpointManager for ``<output>/checkpoints/<name>`` (also searching inputs)."""
        return self.policy.checkpoints(name, **kwargs)

    def data_dir(self, required: list[str] = ()) -> Path | None:
        """The ``data_dir`` parameter as a Path (a folder, or the ``owner/slug`` of an
        attached Kaggle source in either input layout), None when empty; missing files raise."""
        value = self.config.get("data_dir") or ""
        if not value:
            return None
        path = Path(value).expanduser()
        if not path.is_dir():
            path = inputs.attached(value, env.where().input_roots) or path
        if not path.is_dir():
            raise DataDirError(f"data_dir={value!r} does not exist: no folder and no attached Kaggle "
                               "source (owner/slug under /kaggle/input). Leave data_dir empty for "
                               "the built-in data, or attach the dataset (dataset_sources in "
                               "kernel-metadata) and give its owner/slug or folder.")
        missing = [name for name in required if not any(path.rglob(name))]
        if missing:
            raise DataDirError(f"data_dir={value!r} lacks {', '.join(missing)}: this pipeline "
                               f"needs {', '.join(required)} somewhere under it.")
        return path

    def log(self, **metrics) -> None:
        """Add facts to metrics.json (written at once, atomically)."""
        self.metrics.update(metrics)
        self.save_metrics()

    def log_fit(self, label: str, result, step_plot: bool = True) -> None:
        """A fit's summary into metrics.json under ``label``, and its monitoring plots.

        ``<label>_step_time.png``: where a step's time goes (sampled phases; pass
        ``step_plot=False`` to draw several fits side by side with
        ``plots.step_breakdown`` instead); ``<label>_gpu.png``: utilisation and
        memory per GPU over time (on GPU). ``result``: a FitResult, or its
        ``summary()`` (what launched ranks send back).
        """
        from . import plots
        summary = dict(result.summary() if hasattr(result, "summary") else result)
        self.chain[label] = what_it_did(summary, self.policy.session if self.policy else "")
        timeline = summary.pop("gpu_timeline", None) or []
        earlier = self.previous.get(label)
        if summary.get("stopped") == "already_complete" and earlier:
            # A rerun that skipped training measured nothing: keep the figures of the run
            # that trained (speed, step breakdown, diagnosis), not zeros over them.
            summary = {**earlier, "stopped": "already_complete", "skipped_rerun": True,
                       "steps_this_session": 0, "resumed_from": summary.get("resumed_from")}
        self.log(**{label: summary}, chain=self.chain)
        if step_plot and summary.get("step_breakdown", {}).get("sampled_steps"):
            self.savefig(plots.step_breakdown({label: summary["step_breakdown"]}),
                         f"{label}_step_time")
        if timeline:
            self.savefig(plots.gpu_timeline(timeline), f"{label}_gpu")

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
        self.log(summary=headlines)
        display.show_markdown(display.summary_markdown(headlines))
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


def _previous_metrics(output: Path) -> dict:
    try:
        return json.loads((output / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def start(namespace: dict, name: str, *, smoke: dict | None = None,
          declared: dict | None = None, verbose: bool = True) -> Run:
    """Validate a notebook's parameters and set the run up.

    Args:
        namespace: the notebook's ``globals()``; parameters are read from it.
        name: the notebook's name (its output folder locally is ``runs/<name>``).
        smoke: parameter values that replace the given ones when ``smoke`` is true
            (a tiny run through every code path, for CI); recorded in the config.
        declared: ``{name: default}`` when not running in a notebook.
    """
    config = params.validate(namespace, declared)
    if config.get("smoke") and smoke:
        unknown = sorted(set(smoke) - set(config))
        if unknown:
            raise params.ParameterError(f"smoke overrides {unknown} are not parameters")
        config.update(smoke)
        namespace.update(smoke)
    output = env.working_dir(name)
    os.environ[ranklog.LOG_DIR_ENV] = str(output / "logs")  # launched ranks write there
    report = env.describe_machine(config.get("precision", "auto"), output, verbose=verbose)
    seed = int(config.get("seed", 0))
    env.seed_everything(seed)
    config = json.loads(json.dumps(config, default=str))
    # Decided once, here; launch and tune carry it into every rank and worker.
    run_policy = policy_mod.Policy.from_config(config, output, report.where.input_roots)
    run_policy.inputs.by_name  # walk the inputs now, once, before any rank forks
    policy_mod.install(run_policy)
    run = Run(name=name, config=config, output_dir=output, env=report, seed=seed,
              previous=_previous_metrics(output), policy=run_policy)
    run.data_dir()  # fail now, before any work, if the folder is missing
    expected = os.environ.get("KAGGLEKIT_EXPECT_GPUS")  # set by the pushed notebook
    if expected:
        run.metrics["accelerator"] = env.check_accelerator(report.gpus, expected)
    run.save_metrics()
    return run
