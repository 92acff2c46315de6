"""A generation competition's metric by name, computed by sacrebleu (what translation competitions
score with): corpus BLEU, chrF, chrF++ (chrF with word bigrams), their geometric mean
``bleu_chrf`` (sqrt(BLEU x chrF++): order from BLEU, spelling from chrF), or ``exact`` (the share
of texts equal to their reference after stripping, for answers written out). All on 0-100 but
``exact`` (0-1); higher is better for each.
"""
from __future__ import annotations

import math

METRICS = ("bleu", "chrf", "chrf++", "bleu_chrf", "exact")


def check(name: str) -> str:
    """``name`` when the kit knows it, else a ValueError naming the ones it does."""
    if name not in METRICS:
        raise ValueError(f"metric={name!r}: one of {', '.join(METRICS)} (the competition's text metric)")
    return name


def score(name: str, hypotheses: list[str], references: list[str]) -> float:
    """``name`` of the texts ``hypotheses`` against one reference each (corpus level)."""
    import sacrebleu
    check(name)
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} texts for {len(references)} references")
    hypotheses = ["" if h is None else str(h) for h in hypotheses]
    if name == "exact":
        return sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / max(len(references), 1)
    if name == "bleu":
        return float(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    chrf = float(sacrebleu.corpus_chrf(hypotheses, [references], word_order=0 if name == "chrf" else 2).score)
    if name == "bleu_chrf":
        return math.sqrt(max(score("bleu", hypotheses, references), 0.0) * chrf)
    return chrf
