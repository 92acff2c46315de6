"""DataLoaders with defaults that fit the machine, and a resumable sampler.

The sampler is torch's DistributedSampler (one shard per rank, a permutation
that depends only on seed + epoch) plus a position: after a mid-epoch resume
the loader continues with the very next batch instead of restarting the epoch.
"""
from __future__ import annotations

import os

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ..machine import env
from . import ranks


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can skip the samples already consumed this epoch.

    Works without a process group too (``num_replicas=1, rank=0``).
    """

    def __init__(self, dataset: Dataset, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, num_replicas: int | None = None, rank: int | None = None):
        if num_replicas is None or rank is None:
            num_replicas, rank = ranks.world_size(), ranks.rank()
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                         seed=seed, drop_last=drop_last)
        self.skip = 0

    def set_position(self, epoch: int, samples_done: int) -> None:
        """Start ``epoch`` after ``samples_done`` of this rank's samples."""
        self.set_epoch(epoch)
        self.skip = samples_done

    def __iter__(self):
        indices = list(super().__iter__())
        skip, self.skip = self.skip, 0  # the skip applies to one pass only
        return iter(indices[skip:])

    def __len__(self) -> int:
        return self.num_samples - self.skip


class LengthGroupedSampler(ResumableSampler):
    """A ResumableSampler whose batches hold samples of similar length (``lengths``), so that
    padding each batch to its longest sample (dynamic padding) pads little.

    The epoch's permutation (seed + epoch, as torch's) is cut into groups of ``group`` global
    batches; each group is sorted by length and cut into global batches (``batch_size`` per
    rank), and the batches are shuffled, the one holding the longest sample first (an
    out-of-memory error shows at the first step, not hours in). Rank r of w takes every w-th
    sample, so each rank's batch is its share of one global batch. Resumes like its parent:
    the order depends only on seed and epoch, the position skips what was trained.
    """

    def __init__(self, dataset: Dataset, lengths, batch_size: int, *, group: int = 64,
                 seed: int = 0, drop_last: bool = False, num_replicas: int | None = None,
                 rank: int | None = None):
        super().__init__(dataset, shuffle=True, seed=seed, drop_last=drop_last,
                         num_replicas=num_replicas, rank=rank)
        if len(lengths) != len(dataset):  # type: ignore[arg-type]  # a map-style dataset
            raise ValueError(f"{len(lengths)} lengths for {len(dataset)} samples: one per sample")  # type: ignore[arg-type]
        self.lengths, self.batch_size, self.group = list(lengths), batch_size, group

    def global_order(self) -> list[int]:
        """Every sample of the epoch, in global batches of similar length."""
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.dataset), generator=g).tolist()  # type: ignore[arg-type]
        size = self.batch_size * self.num_replicas
        batches = []
        for start in range(0, len(order), size * self.group):
            chunk = sorted(order[start:start + size * self.group], key=self.lengths.__getitem__,
                           reverse=True)
            batches += [chunk[i:i + size] for i in range(0, len(chunk), size)]
        tail = [batches.pop()] if len(batches[-1]) < size else []  # last: batches stay aligned
        longest = max(range(len(batches)), key=lambda i: self.lengths[batches[i][0]]) if batches else None
        rest = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist() if i != longest]
        first = [batches[longest]] if longest is not None else []
        return [i for batch in [*first, *rest, *tail] for i in batch]

    def __iter__(self):
        order = self.global_order()
        if self.drop_last:
            order = order[:self.total_size]
        else:  # padded with repeats to a multiple of the world size, as torch's sampler pads
            order += (order * (1 + self.total_size // max(len(order), 1)))[:self.total_size - len(order)]
        mine = order[self.rank:self.total_size:self.num_replicas]
        skip, self.skip = self.skip, 0
        return iter(mine[skip:])


def workers_per_process(processes: int = 1, cpus: int | None = None) -> int:
    """Loader workers per training process, leaving one CPU for the main thread.

    Kaggle's T4 x2 has about 4 vCPUs for 2 GPUs: 1 worker each, not 4.
    """
    if cpus is None:
        cpus = env.cpus()
    return max(0, (cpus - processes) // max(1, processes))


def _workers_from_env(value: str) -> int:
    if not value.strip().isdigit():
        raise ValueError(f"NUM_WORKERS={value!r} must be a whole number of loader workers "
                         "(0: load in the training process), or unset for the machine's default")
    return int(value)


WORKER_TIMEOUT_S = 600.0  # a loader worker silent for this long is stalled, not slow


class LoaderError(RuntimeError):
    """A DataLoader worker died or stalled."""


def next_batch(batches, loader):
    """``next(batches)``; a dead or stalled worker becomes a LoaderError naming it."""
    try:
        return next(batches)
    except RuntimeError as err:
        text = str(err)
        if "DataLoader worker" not in text and "DataLoader timed out" not in text:
            raise
        workers = getattr(loader, "num_workers", "?")
        raise LoaderError(
            f"{text.splitlines()[0]} (one of {workers} loader workers). A worker killed by "
            "SIGKILL usually ran out of host memory: fewer workers (num_workers, or the "
            "NUM_WORKERS variable) or a smaller prefetch; a stalled one is stuck in the dataset's "
            f"__getitem__ (reading a file, a lock) for longer than timeout_s.") from err


def make_loader(dataset: Dataset, batch_size: int, *, train: bool = True, seed: int = 0,
                device: torch.device | str = "cpu", num_workers: int | None = None,
                drop_last: bool | None = None, collate_fn=None, prefetch_factor: int = 4,
                processes: int | None = None, timeout_s: float = WORKER_TIMEOUT_S,
                lengths=None) -> DataLoader:
    """A DataLoader tuned for this machine.

    Args:
        train: shuffle (by seed and epoch) and drop the last partial batch (never the
            only batch: a data set smaller than one batch trains on a partial batch).
        device: pinned memory is used when it is CUDA.
        num_workers: default: the ``NUM_WORKERS`` environment variable when set, else
            from the CPU count and the number of processes.
        processes: training processes on this machine (default: the world size).
        timeout_s: seconds a worker may take for one batch before it counts as stalled.
        lengths: each sample's length (tokens): training batches of similar lengths
            (``LengthGroupedSampler``), for a ``collate_fn`` that pads to the longest.
    """
    world = ranks.world_size()
    if num_workers is None and os.environ.get("NUM_WORKERS", "").strip():
        num_workers = _workers_from_env(os.environ["NUM_WORKERS"])  # the owner knows best
    if num_workers is None:
        num_workers = workers_per_process(processes or world)
    drop_last = train if drop_last is None else drop_last
    if drop_last and len(dataset) < batch_size * world:  # type: ignore[arg-type]  # a map-style dataset
        drop_last = False  # dropping the only (partial) batch would leave nothing to train on
    sampler: DistributedSampler
    if lengths is not None and train:
        sampler = LengthGroupedSampler(dataset, lengths, batch_size, seed=seed, drop_last=drop_last)
    else:
        sampler = ResumableSampler(dataset, shuffle=train, seed=seed, drop_last=drop_last)
    # A dedicated generator keeps worker seeding off the global RNG, so a resumed
    # run draws exactly the random numbers the uninterrupted one drew.
    generator = torch.Generator().manual_seed(seed)
    # Workers fork from this process (a rank's own, or the notebook's), so datasets defined in
    # the notebook reach them; they never touch CUDA (Python 3.14's default would pickle them).
    workers: dict = dict(persistent_workers=True, prefetch_factor=prefetch_factor, timeout=timeout_s,
                   multiprocessing_context="fork") if num_workers else {}
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last,
                      num_workers=num_workers, pin_memory=torch.device(device).type == "cuda",
                      collate_fn=collate_fn, generator=generator, **workers)


def start_epoch(loader, epoch: int, batches_done: int = 0) -> int:
    """Position ``loader`` at batch ``batches_done`` of ``epoch``.

    Returns the number of batches that still have to be skipped by iterating
    (non-zero only when the loader's sampler cannot seek).
    """
    if not isinstance(loader, DataLoader):
        return batches_done
    sampler = loader.sampler
    if getattr(loader, "generator", None) is not None:
        loader.generator.manual_seed(_epoch_seed(sampler, epoch))
    if isinstance(sampler, ResumableSampler):
        sampler.set_position(epoch, batches_done * (loader.batch_size or 1))
        return 0
    if isinstance(sampler, DistributedSampler):
        sampler.set_epoch(epoch)
    return batches_done


def _epoch_seed(sampler, epoch: int) -> int:
    return (getattr(sampler, "seed", 0) * 1_000_003 + epoch) % 2**63


def to_device(batch, device: torch.device, non_blocking: bool = True):
    """Move tensors in (nested) tuples, lists and dicts; other values pass through."""
    if isinstance(batch, torch.Tensor):
        # Already there (a CPU run): no call into torch at all, on the loop's hot path.
        return batch if batch.device == device else batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        moved = [to_device(b, device, non_blocking) for b in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    if hasattr(batch, "to"):  # e.g. torch_geometric Data / Batch
        return batch.to(device, non_blocking=non_blocking)
    return batch


def schedule(steps: int, loader, steps_between_evals: int, accumulate: int = 1) -> dict:
    """``fit`` arguments for a schedule counted in optimizer steps: ``steps`` in all,
    an evaluation (and checkpoint) every ``steps_between_evals`` steps (at the end when the
    run is shorter), or every pass over ``loader`` when that is shorter; ``accumulate``
    batches make one step.
    ``fit(..., **schedule(200, loader, 10))``."""
    if steps < 1 or steps_between_evals < 1 or accumulate < 1:
        raise ValueError(f"steps={steps}, steps_between_evals={steps_between_evals} and "
                         f"accumulate={accumulate} must be >= 1")
    # batches per epoch; an interval longer than the run still evaluates once, at its end
    per_epoch = min(len(loader), min(steps, steps_between_evals) * accumulate)
    steps_per_epoch = max(per_epoch // accumulate, 1)
    return {"epochs": -(-steps // steps_per_epoch), "limit_batches": per_epoch, "max_steps": steps,
            "accumulate": accumulate}
