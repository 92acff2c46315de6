"""Which predictions a notebook submits: the best on honest out-of-fold score, never a worse one.

A notebook measures several candidates on the same folds (single models, a hill climb, a stack,
a cheap baseline) and must submit the best of them: a fine-tuned transformer that lost to its own
TF-IDF baseline is not what a competitor sends. ``choose`` takes each candidate's CV score, OOF
and test predictions, picks the best in the metric's direction (a tie goes to the candidate named
first: list the simpler one first), and says why in a sentence. Every score handed in must be
honest: an ensemble's OOF comes from fits that never saw the row (``hillclimb.cross_validated``,
``stacking.stack``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..machine.display import headline


@dataclass
class Candidate:
    score: float  # its CV score: the mean of its folds' scores (``Metric.cv``), as every candidate's
    oof: Any = None  # its out-of-fold predictions (an array, or what its metric reads)
    test: Any = None  # its test predictions (what the submission is written from)


@dataclass
class Choice:
    name: str  # the candidate submitted
    score: float
    scores: dict  # every candidate's CV score, in the order given
    runner_up: str | None  # the best of the others (None with a single candidate)
    metric: str
    higher_is_better: bool
    candidate: Candidate

    @property
    def reason(self) -> str:
        """One sentence: what is submitted, its score, and what it beat."""
        others = ", ".join(f"{n} {s:.5g}" for n, s in self.scores.items() if n != self.name)
        return (f"submitting {self.name}: CV {self.metric} {self.score:.5g}, the best of "
                f"{len(self.scores)}" + (f" ({others})" if others else ""))

    def headline(self, result: str = "") -> dict:
        """The submission's CV score judged against the next best candidate: it passes when no
        candidate scored better (a tie included), which ``choose`` guarantees unless a score was NaN."""
        label = result or f"CV {self.metric} of the submission ({self.name})"
        if self.runner_up is None:
            return headline(label, self.score, higher_is_better=self.higher_is_better)
        runner = self.scores[self.runner_up]
        return headline(label, self.score, baseline=runner, vs=f"next best: {self.runner_up}", goal=runner,
                        higher_is_better=self.higher_is_better)

    def record(self) -> dict:
        """What metrics.json keeps of the choice (a later kernel reads it back)."""
        return {"model": self.name, "score": self.score, "scores": self.scores, "metric": self.metric,
                "reason": self.reason}


def choose(candidates: dict[str, Candidate], metric: str, higher_is_better: bool) -> Choice:
    """The best of ``candidates`` (name -> Candidate) on CV; NaN scores never win."""
    if not candidates:
        raise ValueError("choose needs at least one candidate with a CV score")
    scores = {name: float(c.score) for name, c in candidates.items()}
    ranked = [n for n in scores if scores[n] == scores[n]]  # NaN != NaN
    if not ranked:
        raise ValueError(f"every candidate's CV {metric} is NaN ({', '.join(scores)}): nothing to submit")
    sign = 1 if higher_is_better else -1
    best = max(ranked, key=lambda n: (sign * scores[n], -list(scores).index(n)))
    rest = [n for n in ranked if n != best]
    runner_up = max(rest, key=lambda n: (sign * scores[n], -list(scores).index(n))) if rest else None
    return Choice(best, scores[best], scores, runner_up, metric, higher_is_better, candidates[best])
