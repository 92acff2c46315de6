"""Showing results in the notebook itself: figures inline, tables as tables, a summary.

A Kaggle user judges a kernel version by its executed notebook, so what a run saves
as files (PNG plots, metrics) is also shown where it is made. Outside a notebook
kernel (a script, a launched rank) these calls do nothing but what they return.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

INJECTED_MARK = "# Parameters"  # first line of the cell papermill injects


def in_notebook() -> bool:
    """True inside a Jupyter kernel (papermill, Kaggle, JupyterLab), not a plain shell."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def notice(text: str) -> None:
    """What the kit decided for the user about their input (a separator found, a folder read as
    another, rows left out): printed in the notebook, and appended to ``$KAGGLEKIT_NOTICES`` where
    ``make run`` sets it, so the terminal shows it too, not only the executed notebook."""
    print(f"kagglekit: {text}", flush=True)
    where = os.environ.get("KAGGLEKIT_NOTICES")
    if where:
        with open(where, "a", encoding="utf-8") as f:
            f.write(" ".join(text.split()) + "\n")


def _display(obj) -> None:
    from IPython.display import display
    display(obj)


def show_png(path: Path | str) -> None:
    """Display a saved PNG inline (the very bytes of the file)."""
    if in_notebook():
        from IPython.display import Image
        _display(Image(data=Path(path).read_bytes(), format="png"))


def frame(rows: list[dict], digits: int = 4):
    """A pandas DataFrame of ``rows`` with floats rounded for reading."""
    import pandas as pd
    df = pd.DataFrame(rows)
    return df.round(digits) if len(df) else df


def text_table(rows: list[dict], widest: int = 100, digits: int = 4) -> str:
    """``rows`` as a terminal shows them: columns left-aligned, floats rounded, a cell longer than
    ``widest`` characters cut with "..." (one run's long headline would push every row off screen)."""
    columns = list(dict.fromkeys(k for r in rows for k in r))

    def cell(value) -> str:
        text = "" if value is None else str(round(value, digits) if isinstance(value, float) else value)
        return text if len(text) <= widest else text[:widest - 3] + "..."
    cells = [columns] + [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells)


def show_table(rows: list[dict], digits: int = 4) -> None:
    """An HTML table in a notebook (a pandas DataFrame), plain text elsewhere."""
    if not rows:
        return
    if in_notebook():  # without the 0, 1, 2... row index, which says nothing here
        _display(frame(rows, digits).style.hide(axis="index").format(precision=digits))
    else:
        print(frame(rows, digits).to_string(index=False))


def show_markdown(text: str) -> None:
    if in_notebook():
        from IPython.display import Markdown
        _display(Markdown(text))
    else:
        print(text)


def headline(result: str, value: float | None, *, baseline: float | None = None, vs: str = "",
             goal: float | None = None, higher_is_better: bool = True) -> dict:
    """One headline result, judged by ``goal`` when given, else by beating ``baseline``.

    Args:
        result: what was measured ("test PR-AUC").
        value / baseline: the run's figure and the baseline's (``vs`` names the baseline).
        goal: the criterion the result is judged by (e.g. 0.80 for PR-AUC >= 0.80).
        higher_is_better: direction of both comparisons.
    """
    sign = ">=" if higher_is_better else "<="
    better = (lambda a, b: a >= b) if higher_is_better else (lambda a, b: a <= b)
    known = value is not None and not (isinstance(value, float) and math.isnan(value))
    if goal is not None:
        criterion, passed = f"{sign} {goal:g}", known and better(value, goal)
    elif baseline is not None:
        criterion = f"{'>' if higher_is_better else '<'} {vs or 'baseline'}"
        passed = known and value != baseline and better(value, baseline)
    else:
        criterion, passed = "", None
    return {"result": result, "value": value, "baseline": baseline, "vs": vs,
            "criterion": criterion, "passed": passed}


def summary_markdown(rows: list[dict], notes: list[str] | tuple[str, ...] = ()) -> str:
    """The short Markdown summary: one line per headline with its pass/fail mark, then what the
    run dropped or skipped on the way (its notes)."""
    lines = ["### Results"]
    for r in rows:
        mark = {True: "✅", False: "❌", None: "•"}[r["passed"]]
        value = _fmt(r["value"])
        against = f" vs {r['vs'] or 'baseline'} {_fmt(r['baseline'])}" if r["baseline"] is not None else ""
        judged = f" (criterion: {r['criterion']})" if r["criterion"] else ""
        lines.append(f"- {mark} **{r['result']}**: {value}{against}{judged}")
    lines += ["", "**On the way:**"] + [f"- {n}" for n in notes] if notes else []
    return "\n".join(lines)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
