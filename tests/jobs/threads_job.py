"""A notebook's process runs a parallel CPU op, then launches two ranks that run their own:
GNU OpenMP is not fork-safe, so a rank opening a parallel region of more than one thread hung
(tests/test_launch.py runs this under a timeout)."""
import torch

import kagglekit as kk


def rank_work() -> float:
    a = torch.randn(400, 400)
    return float((a @ a.T).sum()) + float(torch.randn(2_000_000).sum())


if __name__ == "__main__":
    from kagglekit.machine import env
    env.cpus = lambda: 4  # Kaggle's T4 x2 machine: 4 vCPUs for its 2 ranks
    torch.set_num_threads(2)
    x = torch.randn(2000, 400)
    (x @ x.T).sum()  # the notebook's data preparation: a parallel region before the fork
    kk.launch(rank_work, nprocs=2, join_timeout_s=60)
    print("RANKS DONE", flush=True)
