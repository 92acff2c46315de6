"""The kit's DDP step against a plain torch DDP loop: two gloo processes, the same batches.

Each of two ranks (``kk.launch``, gloo on this CPU machine) trains an MLP of a few million
parameters on its own shard of fixed batches, in blocks of ``--steps`` optimizer steps, ABBA-
interleaved (plain, kit, kit, plain...) so that drift hits both alike:

- plain: ``DistributedDataParallel(model)``, then forward, ``loss.backward()`` (DDP's buckets
  all-reduce during backward), ``optimizer.step()``, ``zero_grad``: what torch's DDP tutorial
  writes;
- kit: ``kk.fit`` over the same batches with its defaults (OOM back-off on, the step-time
  sampler every 25 steps, checkpoints off).

Both sides build their DDP wrapper inside the block (``fit`` wraps the model itself); the
ranks meet at a barrier before and after each block. Prints the median of the paired ratios
plain time / kit time, with quartiles (goal >= 0.97).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kagglekit as kk  # noqa: E402

GOAL = 0.97


def mlp(width: int) -> nn.Module:
    """width 2048: 512 -> 2048 -> 1024 -> 10, 3.16 M parameters."""
    return nn.Sequential(nn.Linear(512, width), nn.ReLU(), nn.Linear(width, width // 2), nn.ReLU(),
                         nn.Linear(width // 2, 10))


def batches(rank: int, steps: int, batch: int) -> list:
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(batch, 512, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(steps)]


def plain(model, data) -> None:
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for x, y in data:
        F.cross_entropy(ddp(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def kit(model, data) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    kk.fit(model, optimizer, data, kk.supervised(F.cross_entropy), run=kk.Alone(device="cpu"), epochs=1,
           progress=False, checkpoints=None, save_every_min=None, speed=kk.Speed(precision="fp32"))


def timed(fn, model, data) -> float:
    dist.barrier()
    started = time.perf_counter()
    fn(model, data)
    dist.barrier()
    return time.perf_counter() - started


def rank_body(repeats: int, steps: int, batch: int, width: int) -> dict | None:
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = mlp(width)
    data = batches(rank, steps, batch)
    timed(plain, model, data)  # warm-up: allocator, gloo connections
    timed(kit, model, data)
    pairs = []
    for i in range(repeats):
        order = (plain, kit) if i % 2 == 0 else (kit, plain)
        times = {fn.__name__: timed(fn, model, data) for fn in order}
        pairs.append(times)
    if rank != 0:
        return None
    return {"pairs": pairs, "params": sum(p.numel() for p in model.parameters())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps per timed block")
    ap.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    ap.add_argument("--width", type=int, default=2048)
    args = ap.parse_args()
    out = kk.launch(rank_body, args.repeats, args.steps, args.batch, args.width, nprocs=2)
    ratios = sorted(p["plain"] / p["kit"] for p in out["pairs"])
    q1, median, q3 = statistics.quantiles(ratios, n=4)
    plain_s = statistics.median(p["plain"] for p in out["pairs"])
    kit_s = statistics.median(p["kit"] for p in out["pairs"])
    print(f"DDP, 2 gloo processes, MLP of {out['params'] / 1e6:.2f} M parameters, batch "
          f"{args.batch} per rank, {args.steps} steps a block, {args.repeats} ABBA pairs")
    print(f"  plain DDP loop: {1e3 * plain_s / args.steps:7.1f} ms/step (median)")
    print(f"  kit fit       : {1e3 * kit_s / args.steps:7.1f} ms/step (median)")
    print(f"  paired ratio plain/kit: median {median:.3f} (quartiles {q1:.3f}-{q3:.3f}); "
          f"goal >= {GOAL}: {'met' if median >= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
