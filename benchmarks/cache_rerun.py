"""Wall time of a cached rerun of timeseries_forecast against its first run.

Both runs execute the notebook end to end with papermill (kernel start, imports,
data, features, scoring, plots) in one fresh output folder with the same
parameters. The first trains the four models (XGBoost, LightGBM, LSTM, tuned LSTM)
and runs the three Optuna searches; the second finds every model in the cache and
every study at its total. Goal: the rerun takes <= 10% of the first run's time.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from kagglekit.tools.notebook_runner import parse_overrides, run_notebook

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "timeseries_forecast.ipynb"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                    help="notebook parameters for both runs (default: the local defaults)")
    args = ap.parse_args()
    params = parse_overrides(args.param)
    with tempfile.TemporaryDirectory() as tmp:
        times = []
        for label in ("first", "cached"):
            started = time.perf_counter()
            out = run_notebook(NOTEBOOK, params, output_dir=Path(tmp) / "ts", progress=False)
            times.append(time.perf_counter() - started)
            cache = json.loads((out / "metrics.json").read_text())["cache"]
            print(f"{label:6} run: {times[-1]:7.1f} s  (cache hits {cache['hits']}, "
                  f"misses {cache['misses']}, training skipped {cache['seconds_saved']:.1f} s)")
            for e in cache["entries"]:
                print(f"         {e['name']:11} {'hit ' if e['hit'] else 'miss'} "
                      f"{e.get('seconds', e.get('seconds_saved')):7.1f} s of training")
    print(f"cached / first: {times[1] / times[0]:.3f}   (goal <= 0.10; parameters {params or 'defaults'})")


if __name__ == "__main__":
    main()
