"""One worker of a study shared by several processes (standing for kernels or machines).

Usage: shared_study_job.py STORAGE N_TRIALS SLEEP_S OUTPUT_DIR
Each trial announces itself, then works SLEEP_S seconds; the report goes to OUTPUT_DIR.
"""
import sys
import time

from kagglekit import tune


def objective(trial):
    x = trial.suggest_float("x", -2, 2)
    print(f"trial {trial.number} started", flush=True)
    time.sleep(float(sys.argv[3]))
    return -x * x


if __name__ == "__main__":
    study = tune.optimize(objective, "shared", int(sys.argv[2]), directory=sys.argv[4],
                          storage=sys.argv[1], workers=1, heartbeat_s=1, grace_s=2, seed=None)
    tune.summarize(study, sys.argv[4], prefix="shared")
