"""A search the tests SIGKILL midway: each trial announces itself, then works a while."""
import sys
import time

from kagglekit import tune


def objective(trial):
    x = trial.suggest_float("x", -2, 2)
    print(f"trial {trial.number} started", flush=True)
    time.sleep(float(sys.argv[3]))
    return -x * x


if __name__ == "__main__":
    tune.optimize(objective, "killed", int(sys.argv[2]), directory=sys.argv[1], workers=1,
                  heartbeat_s=1, grace_s=2)
