"""Kaggle's scoring rerun planned before it is submitted: what it will train, and whether it fits.

A code competition reruns the submitted version on the hidden test set within a limit (9 hours,
some 12). A notebook that trains in that rerun (test-time training: the hidden test brings rows
to learn from, as Jigsaw 2025's labelled examples did) must know before submitting that the work
fits. The plan: each unit's time as measured in this version, scaled to the rows it will train on
in the rerun (time in proportion to rows: the same epochs over more texts), added up in the order
the rerun runs them, beside the time that is not training (``fixed_s``: predicting the hidden
test), against the limit less Kaggle's margin for writing the outputs.

A unit that only predicts (``trains=False``: an exported model's or an LLM engine's share of the
hidden test) is planned the same way, and ``beside`` keeps what another model would take on the same
hidden test (a student's plan names its teacher's time: what the student saves the rerun's clock).

``make submit`` reads the plan from the version's metrics.json (``problem``): a plan that fits is
accepted and ``describe`` says what the rerun will train and predict; one that does not is refused,
naming the first unit that would end past the limit. A version that trained is still refused unless
its plan trains in the rerun: a plan of predictions alone licenses no training. In the rerun
itself each fold still asks the budget before it starts (``CrossValidation`` times the first and
asks ``Unit.fits`` for the next), and a fit the deadline cuts short stops with a checkpoint: a
slower machine stops what will not fit instead of being killed, and the notebook submits what it has.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..machine.budget import KAGGLE_MARGIN_S


@dataclass(frozen=True)
class Planned:
    name: str  # the unit's name ("text-fold0")
    measured_s: float  # how long it took in this version
    rows: int  # the rows it trained on in this version
    rerun_rows: int  # the rows it will train on (or predict) in the rerun
    trains: bool = True  # False: it predicts the hidden test (an engine's or an export's share)

    @property
    def seconds(self) -> float:
        return self.measured_s * self.rerun_rows / max(self.rows, 1)


def plan(units: list[Planned], hours: float, fixed_s: float = 0.0, margin_s: float = KAGGLE_MARGIN_S,
         beside: dict[str, float] | None = None) -> dict:
    """The rerun's plan (what metrics.json keeps as ``rerun_plan``): each unit's estimate and
    when it would end, the total, the limit, and whether it fits. ``beside``: the seconds other
    models would take in this plan's place (a student's teacher), kept for comparison only."""
    total, rows = fixed_s, []
    for unit in units:
        total += unit.seconds
        rows.append({"name": unit.name, "measured_s": round(unit.measured_s, 3), "rows": unit.rows,
                     "rerun_rows": unit.rerun_rows, "seconds": round(unit.seconds, 3), "ends_at_s": round(total, 3),
                     "trains": unit.trains})
    limit = hours * 3600 - margin_s
    return {"hours": hours, "limit_s": limit, "fixed_s": round(fixed_s, 3), "units": rows,
            "total_s": round(total, 3), "fits": total <= limit,
            "beside": {name: round(seconds, 3) for name, seconds in (beside or {}).items()}}


def training(recorded: dict) -> list[str]:
    """The units the plan trains in the rerun (a plan written before ``trains`` existed trains all of them)."""
    return [u["name"] for u in recorded.get("units", []) if u.get("trains", True)]


def problem(recorded: dict) -> str:
    """Why a version with this plan cannot be submitted ("" when its plan fits)."""
    if recorded["total_s"] <= recorded["limit_s"]:
        return ""
    over = next((u for u in recorded["units"] if u["ends_at_s"] > recorded["limit_s"]), None)
    where = (f"{over['name']} (about {_hours(over['seconds'])} on {over['rerun_rows']:,} rows) would end at "
             f"{_hours(over['ends_at_s'])}" if over else "predicting the hidden test alone exceeds it")
    return (f"its rerun plan needs {_hours(recorded['total_s'])} of the {recorded['hours']:g} h limit "
            f"({_hours(recorded['limit_s'])} once Kaggle's margin is kept): {where}. Train less in the rerun "
            "(fewer folds or epochs, a smaller model) or publish the weights and submit an inference kernel")


def describe(recorded: dict) -> str:
    """What the rerun will train and predict, in one line, and what the models beside it would take."""
    trained = training(recorded)
    predicting = len(recorded["units"]) - len(trained)  # units of prediction (the rest is in fixed_s)
    work = f"train {', '.join(trained)} on the hidden test's rows and " if trained else ""
    models = f" ({predicting} model{'s' * (predicting > 1)})" if predicting else ""
    others = "".join(f"; {name} would take about {_hours(seconds)}"
                     for name, seconds in recorded.get("beside", {}).items())
    return (f"the scoring rerun will {work}predict the hidden test{models}: about {_hours(recorded['total_s'])} "
            f"of the {recorded['hours']:g} h limit{others}")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
