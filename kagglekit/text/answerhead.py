"""A causal LM as a classifier through its own answer tokens: the logit of one token per class.

The way the Jigsaw Agile Community Rules 2025 winners scored a decoder: the text goes into a
prompt that ends in a question ("... Answer:"), and the class is read off the language model's
next-token logits at the prompt's last real token, one token per class ("Yes"/"No", or each
label's own first token). No head is added: what the pretrained model knows about its answer
words is kept, and LoRA adapters (on the body) move those logits. Training is a cross-entropy over
the class tokens' logits at that one position: the loss falls on the answer token only, never on
the prompt's tokens.

Only the last real token's hidden state meets the output embedding, and only the class tokens'
rows of it: a 150k-token vocabulary costs ``classes x hidden`` per text instead of
``length x vocabulary`` (Gemma 2's final logit soft-capping is monotone and left out: the order
of the classes' logits, their softmax aside, is the same). Left or right padding: the position
read is the last one the attention mask marks.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput


class AnswerTokenError(ValueError):
    """Answer tokens that cannot stand for the classes."""


def answer_token_ids(tokenizer, classes: list, answers: str = "") -> list[int]:
    """One vocabulary id per class: the first token of each ``answers`` word (comma-separated, in
    the classes' order) or, when empty, of each class's own name, spoken after a space as the
    answer follows the prompt's colon."""
    words = [w.strip() for w in answers.split(",")] if answers else [str(c) for c in classes]
    if len(words) != len(classes):
        raise AnswerTokenError(f"answer_tokens={answers!r} names {len(words)} answers for {len(classes)} classes "
                               f"({', '.join(map(str, classes[:6]))}): give one per class, in that order")
    ids = [tokenizer(" " + w, add_special_tokens=False)["input_ids"][:1] for w in words]
    empty = [w for w, i in zip(words, ids) if not i]
    if empty:
        raise AnswerTokenError(f"answer {empty[0]!r} makes no token: give answer_tokens, one word per class")
    ids = [i[0] for i in ids]
    unknown = [w for w, i in zip(words, ids) if i == tokenizer.unk_token_id]
    if unknown:
        raise AnswerTokenError(f"answer {unknown[0]!r} is not in the model's vocabulary (it reads as the unknown "
                               "token): set answer_tokens to words the model knows")
    seen: dict[int, str] = {}
    for word, i in zip(words, ids):
        if i in seen:
            raise AnswerTokenError(
                f"answers {seen[i]!r} and {word!r} begin with the same token ({tokenizer.convert_ids_to_tokens(i)!r}): "
                "the classes could not be told apart. Set answer_tokens to one distinct word per class "
                "(e.g. 'no,yes' or 'A,B,C')")
        seen[i] = word
    return ids


class AnswerTokenClassifier(nn.Module):
    """``lm`` (a causal LM, LoRA-wrapped or not) scoring ``token_ids`` (one per class) at the last
    real token; ``forward`` takes the tokenized batch dict and returns ``.logits`` (batch,
    classes) and, given ``labels``, ``.loss``, as a sequence-classification model does."""

    def __init__(self, lm: nn.Module, token_ids: list[int]):
        super().__init__()
        self.lm: Any = lm  # a transformers causal LM, maybe wrapped by peft
        self.token_ids = list(token_ids)  # a list, not a buffer: checkpoints hold what trains only
        self.num_labels = len(token_ids)
        self._rows: torch.Tensor | None = None  # the ids on the model's device, made once

    @property
    def config(self):
        return self.lm.config

    def _causal_lm(self) -> Any:
        return self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm

    def forward(self, input_ids, attention_mask, labels=None, **_) -> SequenceClassifierOutput:
        lm: Any = self._causal_lm()
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # left padding starts each text at 0
        hidden = lm.get_decoder()(input_ids=input_ids, attention_mask=attention_mask,
                                  position_ids=positions).last_hidden_state
        last = (torch.arange(attention_mask.shape[1], device=attention_mask.device) * attention_mask).argmax(-1)
        state = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        out = lm.get_output_embeddings()
        if self._rows is None or self._rows.device != state.device:  # not a copy to the GPU every step
            self._rows = torch.as_tensor(self.token_ids, device=state.device)
        rows = self._rows
        if isinstance(getattr(out, "weight", None), torch.Tensor):  # the class rows only
            logits = nn.functional.linear(state, out.weight[rows], None if out.bias is None else out.bias[rows])
        else:  # an int8 copy (machine.int8) packs its weight: the whole layer, then the class columns
            logits = out(state)[:, rows]
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)  # type: ignore[arg-type]  # FloatTensor: a Tensor

    def gradient_checkpointing_enable(self, **kwargs):
        self._causal_lm().gradient_checkpointing_enable(**kwargs)

    def merge_and_unload(self) -> AnswerTokenClassifier:
        """The adapters folded into the base (``machine.int8`` merges before it quantises)."""
        if hasattr(self.lm, "merge_and_unload"):
            self.lm = self.lm.merge_and_unload()
        return self
