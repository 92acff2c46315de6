"""Prompts cut into shards by token count, so that both T4s finish together.

Prompts are sorted by length, longest first (a batch then pads little, and the longest shards
are claimed first), and cut into shards of about ``tokens_per_shard`` tokens each. The shards go
to the engines in that order as each engine frees up, the longest-processing-time-first rule:
no engine is left with more than one shard's work when the other ends. ``balance`` says how even
a split is: the largest shard's tokens over the mean (1.0 is even).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shard:
    index: int
    rows: np.ndarray  # positions in the prompt list, longest first
    tokens: int  # the prompts' tokens, summed (what an engine's time goes with)


def cut(lengths, tokens_per_shard: int) -> list[Shard]:
    """Shards of about ``tokens_per_shard`` tokens (a prompt longer than that is a shard alone),
    each holding prompts of similar length, the longest shard first."""
    if tokens_per_shard < 1:
        raise ValueError(f"tokens_per_shard={tokens_per_shard}: at least 1")
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    shards: list[Shard] = []
    start, total = 0, 0
    for i, row in enumerate(order):
        total += int(lengths[row])
        if total >= tokens_per_shard or i == len(order) - 1:
            rows = order[start:i + 1]
            shards.append(Shard(len(shards), rows, int(lengths[rows].sum())))
            start, total = i + 1, 0
    return sorted(shards, key=lambda s: -s.tokens)


def for_engines(lengths, engines: int, shards_per_engine: int = 8) -> list[Shard]:
    """Shards sized so that each of ``engines`` gets about ``shards_per_engine`` of them: small
    enough that the last one taken ends near the other engine's end, and that a kill loses little."""
    total = int(np.asarray(lengths).sum())
    return cut(lengths, max(1, total // max(1, engines * shards_per_engine)))


def balance(shards: list[Shard]) -> float:
    """The largest shard's tokens over the mean shard's (1.0: all equal)."""
    tokens = np.array([s.tokens for s in shards], dtype=np.float64)
    return float(tokens.max() / tokens.mean()) if len(tokens) else 1.0


def finish_spread(shards: list[Shard], engines: int) -> float:
    """Each engine taking the next shard as it frees up (tokens as time): the last engine's end
    over the first's, 1.0 when both cards finish together."""
    loads = [0] * engines
    for shard in shards:  # longest first, as the engines claim them
        loads[loads.index(min(loads))] += shard.tokens
    return max(loads) / max(1, min(loads))
