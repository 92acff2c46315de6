"""A small encoder taught by the fold transformers: the text notebook's student (issue 87).

The scoring rerun of a code competition predicts the hidden test within its hours, with whatever the
notebook submits: a DeBERTa-class student of a 7B teacher did it in 38 minutes against the teacher's
278 (Jigsaw 2025, 15th place). Fold k's student learns fold k's training texts from their labels and
from fold k's transformer's probabilities of them: that model never saw fold k's validation texts,
so the student's CV on them is as honest as its teacher's (``kk.distill``'s ``"fold"`` policy; the
teacher's out-of-fold probabilities would carry fold k's labels at second hand). The student reads
the texts through its own tokenizer; the loss is ``kk.distill.loss`` on its logits.
"""
from __future__ import annotations

import numpy as np
from torch.utils.data import Dataset

from ..run import distill
from .classifier import TokenizedTexts


class TaughtTexts(Dataset):
    """A fold's training texts as the student reads them: ``{"input_ids", "labels", "soft"}`` items, ``soft``
    the teacher's probabilities of that text (one row per text, in the texts' order)."""

    def __init__(self, texts: TokenizedTexts, soft):
        self.texts, self.soft = texts, np.asarray(soft, dtype=np.float32)
        if texts.labels is None or len(self.soft) != len(texts):
            raise distill.DistillError(f"{len(texts)} training texts (labelled) and {len(self.soft)} rows of the "
                                       "teacher's probabilities: one per text, in their order")

    @property
    def lengths(self) -> list[int]:  # batches of texts of similar length (kk.make_loader's lengths)
        return self.texts.lengths

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> dict:
        return {**self.texts[i], "soft": self.soft[i].tolist()}  # a list: the tokenizer's padding stacks it


def loss(temperature: float = 2.0, mix: float = 0.5):
    """``kk.distill.loss`` for a transformers classifier fed the collated batch: its logits against the
    teacher's ``soft`` probabilities at ``temperature``, ``mix`` of it beside the labels' cross-entropy."""
    taught = distill.loss(temperature, mix)

    def student_loss(model, batch: dict):
        inputs = {k: v for k, v in batch.items() if k not in ("labels", "soft")}
        return taught(lambda x: model(**x).logits, (inputs, batch["labels"], batch["soft"]))
    return student_loss
