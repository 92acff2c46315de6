"""What a rank costs to start when the fork server imported what it will import, against a server
that preloads the libraries only.

A text notebook's rank builds its model through transformers' auto classes, which transformers
imports on first use: each rank imported them again (0.6 s of the 0.95 s a rank cost on CPU,
py-spy over a sandbox version), then walked every object torch and transformers made in its
``gc.collect()`` at the end of the launch. The server now imports those modules too and freezes
its objects (kagglekit.parallel.serverimports). Measured in one run, ABAB, two fresh notebook
processes (each imports transformers, as the text notebook's first cell does):

- baseline: a server that preloads the libraries alone (as before: no serverimports);
- the kit: the server as it starts now.

Each launch is two ranks that build a small BERT from its config and collect garbage, as a
text notebook's rank does; the first launch (the server's cold start) is reported apart.

    python benchmarks/rank_imports.py [--launches 5] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

NOTEBOOK = """
import json, sys, time
import transformers  # the text notebook's first cell
import kagglekit as kk
from kagglekit.parallel import forkserver
if {baseline}:  # the server as it was: the libraries preloaded, nothing imported last, nothing frozen
    forkserver.LAST = "kagglekit.parallel.launcher"


def rank():
    import gc
    from transformers import AutoModelForSequenceClassification, BertConfig
    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, num_labels=2)
    AutoModelForSequenceClassification.from_config(config)
    gc.collect()  # as launcher._leave_group does


seconds = []
for _ in range({launches}):
    started = time.perf_counter()
    kk.launch(rank, nprocs=2)
    seconds.append(time.perf_counter() - started)
print("RESULT", json.dumps(seconds))
"""


def _notebook(baseline: bool, launches: int) -> list[float]:
    code = NOTEBOOK.format(baseline=baseline, launches=launches)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.split("RESULT", 1)[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    runs: dict[str, list[list[float]]] = {"baseline": [], "kit": []}
    for _ in range(args.rounds):  # ABAB
        runs["baseline"].append(_notebook(True, args.launches))
        runs["kit"].append(_notebook(False, args.launches))
    cold = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
    warm = {k: statistics.median(s for r in v for s in r[1:]) for k, v in runs.items()}
    for name in runs:
        print(f"{name:<9} first launch (server cold) {cold[name] * 1e3:7.0f} ms   "
              f"later launches (two ranks) {warm[name] * 1e3:7.0f} ms")
    print(f"ratio kit / baseline: first launch {cold['kit'] / cold['baseline']:.2f}, "
          f"later launches {warm['kit'] / warm['baseline']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
