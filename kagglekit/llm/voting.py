"""Answers from samples: the answer extracted from a completion, a majority vote over samples, and
minimum-Bayes-risk selection for free text (the candidate the others agree with most, by chrF or
BLEU through sacrebleu: what a translation or summary competition scores with).
"""
from __future__ import annotations

import re
from collections import Counter

ANSWER = re.compile(r"(?:answer\s*(?:is|:)\s*)?\(?([A-Za-z0-9][\w.\-]*)\)?\s*$", re.IGNORECASE)


def extract(text: str, pattern: str | re.Pattern | None = None) -> str | None:
    """The answer in ``text``: ``pattern``'s first group (its whole match without groups), by
    default the last word after "answer is" / "answer:" or alone at the end; None when absent."""
    if pattern is None:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        found = ANSWER.search(lines[-1]) if lines else None
        return found.group(1).rstrip(".") if found else None
    found = re.search(pattern, text)
    if not found:
        return None
    return found.group(1) if found.groups() else found.group(0)


def majority(answers: list, *, none_loses: bool = True):
    """The most frequent answer (ties: the first seen of the most frequent, so the greedy sample,
    given first, breaks them); None answers never win while another exists."""
    counted = Counter(a for a in answers if a is not None or not none_loses)
    if not counted:
        return None
    best = max(counted.values())
    return next(a for a in answers if counted.get(a) == best)


def mbr(candidates: list[str], metric: str = "chrf") -> int:
    """The index of the candidate with the highest mean ``metric`` ("chrf" or "bleu") against
    the others as references: minimum Bayes risk with that metric as the utility."""
    import sacrebleu
    if metric not in ("chrf", "bleu"):
        raise ValueError(f"metric={metric!r}: 'chrf' or 'bleu'")
    if len(candidates) < 2:
        return 0
    scorer = sacrebleu.CHRF() if metric == "chrf" else sacrebleu.BLEU(effective_order=True)
    utility = [sum(scorer.sentence_score(c, [o]).score for j, o in enumerate(candidates) if j != i)
               for i, c in enumerate(candidates)]
    return max(range(len(candidates)), key=utility.__getitem__)
