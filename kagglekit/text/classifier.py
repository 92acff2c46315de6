"""Fine-tuning a pretrained transformer for text classification: the generic parts.

The notebook (``text_classification``) holds the pipeline; this module what any such pipeline
repeats, on top of transformers, peft and tokenizers (imported here only):

- ``TokenizedTexts``: token ids per text (no padding), a batch as the dict the model's forward
  takes; ``collator`` pads each batch to its longest text (to a multiple of 8 for fp16 tensor
  cores); ``kk.make_loader(..., lengths=texts.lengths)`` groups texts of similar length;
- ``load_classifier``: the attached model with a classification head (``head="sequence"``: a
  new linear head on the last real token, [CLS] for an encoder, a sentence encoder's own pooling:
  ``text.pooledhead``) or its own answer tokens (``head="answer_token"``: ``text.answerhead``),
  LoRA adapters (peft), the frozen base in fp16 beside an fp32 head and adapters, the model's own
  gradient checkpointing, 4-bit weights (bitsandbytes, GPU only) or its layers split over the
  GPUs (``device_map``, ``max_memory``);
- ``predict_proba``: texts sorted by length, batched, in the run's precision, shared by
  every rank and gathered in the texts' order.
"""
from __future__ import annotations

import importlib.util
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ..machine.int8 import quantize
from ..parallel import ranks
from ..parallel.loaders import to_device
from ..readers.pretrained import quiet_transformers
from ..score import metrics
from . import pooledhead, prompts, testpredict
from .answerhead import AnswerTokenClassifier


class TokenizedTexts(Dataset):
    """Token ids of each text, and its class when known: ``{"input_ids", "labels"}`` items.

    ``template``: each text put into a prompt (``"Post: {text}\nBreaks the rule? Answer:"``);
    a text too long is cut inside the prompt, so its question (what the answer-token head reads
    after) always stays whole at the end. Its other fields (``{rule}``) are filled from ``fields``,
    a dict per text (``TextCompetition.fields``), and kept whole. ``texts``: the prompts before tokenizing."""

    def __init__(self, tokenizer, texts, max_length: int, labels=None, template: str = "{text}",
                 fields: list[dict] | None = None):
        texts = [str(t) for t in texts]
        prompts.check(template, fields, len(texts))
        if template != "{text}" and texts:
            texts = prompts.fit_into(tokenizer, texts, template, max_length, fields)
        self.ids = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"] if texts else []
        self.labels = None if labels is None else [int(v) for v in labels]
        self.texts, self.cut = texts, (template, max_length)  # what an LLM engine is given: prompts.as_read

    @property
    def lengths(self) -> list[int]:
        return [len(ids) for ids in self.ids]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        item = {"input_ids": self.ids[i]}
        if self.labels is not None:
            item["labels"] = self.labels[i]
        return item

    def subset(self, rows) -> TokenizedTexts:
        """The texts at positions ``rows`` (a fold's), as a dataset of their own."""
        out = TokenizedTexts.__new__(TokenizedTexts)
        out.ids = [self.ids[i] for i in rows]
        out.labels = None if self.labels is None else [self.labels[i] for i in rows]
        out.texts, out.cut = [self.texts[i] for i in rows], self.cut
        return out

    def joined(self, other: TokenizedTexts) -> TokenizedTexts:
        """These texts, then ``other``'s (labelled examples added to a fold's training)."""
        if len(other) and (self.labels is None) != (other.labels is None):
            raise ValueError("joined: labelled and unlabelled texts cannot train together")
        out = self.subset(range(len(self)))
        out.ids = out.ids + other.ids
        out.texts = out.texts + other.texts
        out.labels = None if out.labels is None else out.labels + list(other.labels or [])
        return out

    def truncated(self, max_length: int) -> int:
        """Texts cut at ``max_length`` tokens."""
        return sum(n >= max_length for n in self.lengths)


def collator(tokenizer):
    """Pads a list of items to the batch's longest (a multiple of 8), as a plain dict of
    tensors (what ``fit``, ``to_device`` and the OOM back-off take)."""
    from transformers import DataCollatorWithPadding
    pad = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8, return_tensors="pt")
    return lambda items: dict(pad(items))


def pad_share(loader, batches: int | None = None) -> float:
    """Share of the tokens of ``loader``'s batches that are padding."""
    pads = tokens = 0
    for i, batch in enumerate(loader):
        if batches is not None and i >= batches:
            break
        mask = batch["attention_mask"]
        pads, tokens = pads + int((mask == 0).sum()), tokens + mask.numel()
    return pads / max(tokens, 1)


def refuse(load_in_4bit: bool, placement: str, device: torch.device, gpus: int, processes: int = 0,
           lora_r: int = 0, *, predict_only: bool = False, test_examples: str = "", predict_precision: str = "auto",
           teacher_dir: str = "", engine: str = "loop", head: str = "sequence") -> None:
    """Options the machine or the run cannot honour, refused with the reason before any weight loads."""
    testpredict.check(engine, head, predict_precision, load_in_4bit)
    if test_examples and (predict_only or teacher_dir):  # the rerun trains on its test's own examples
        raise ValueError(f"{'predict_only' if predict_only else 'teacher_dir'} with test_examples: test-time "
                         "training trains in the scoring rerun on texts no inference kernel and no teacher ever saw. "
                         "Leave test_examples empty here")
    if predict_precision not in ("auto", "int8") or (predict_precision == "int8" and device.type != "cpu"):
        raise ValueError(f"predict_precision={predict_precision!r}: auto, or int8 with no GPU ({device} here)")
    if load_in_4bit and not lora_r:
        raise ValueError("load_in_4bit=True freezes the base in 4 bits: only adapters can train it "
                         "(QLoRA). Set lora_r (8-32), or load_in_4bit=False for full fine-tuning.")
    if load_in_4bit and device.type != "cuda":
        raise ValueError("load_in_4bit=True needs a CUDA GPU: bitsandbytes' 4-bit kernels run on "
                         "GPUs only. Set load_in_4bit=False here (CPU), or run on Kaggle's T4s.")
    if load_in_4bit and importlib.util.find_spec("bitsandbytes") is None:
        raise ValueError("load_in_4bit=True needs bitsandbytes, which Kaggle's image lacks: add "
                         '"bitsandbytes" to the kernel\'s "wheels" in kernel-metadata (pinned in '
                         "setup/gpu-requirements.txt), then push again.")
    if placement not in ("ddp", "split"):
        raise ValueError(f"placement={placement!r}: 'ddp' (a copy per GPU) or 'split' (the "
                         "layers over the GPUs, for a model too big for one)")
    if placement == "split" and gpus < 2:
        raise ValueError(f"placement='split' spreads the layers over the GPUs; this machine has "
                         f"{gpus}. Use placement='ddp'.")
    if placement == "split" and processes != 1:
        raise ValueError("placement='split' drives every GPU from one process: set processes=1 "
                         f"(processes={processes} would start one per GPU, each loading the whole model)")


def load_tokenizer(model_dir):
    """The model's tokenizer, with a pad token (decoders ship without one; their head reads
    the last token that is not padding)."""
    from transformers import AutoTokenizer
    quiet_transformers()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def load_classifier(model_dir, num_labels: int, *, head: str = "sequence", answer_ids: list[int] | None = None,
                    lora_r: int = 0, lora_alpha: int = 0, lora_dropout: float = 0.05, load_in_4bit: bool = False,
                    gradient_checkpointing: bool = False, placement: str = "ddp", max_memory_gb: float = 14.0,
                    device=None, precision=None):
    """``(model, tokenizer)``: the attached model as a classifier of ``num_labels`` classes.

    head: "sequence" (a fresh linear head on the last real token; an encoder's on [CLS]; a sentence
        encoder's on its own pooling: ``text.pooledhead``) or
        "answer_token" (the causal LM's logits of ``answer_ids``, one token per class:
        ``text.answerhead``). lora_r: 0 trains every weight; else LoRA adapters of rank
        ``lora_r`` on every linear layer (peft), the sequence head trained whole. The frozen
        base sits in the run's 16-bit type (``precision``: fp16 on a T4) while what trains stays
        fp32, as a GradScaler needs. load_in_4bit: the base in 4-bit NF4 (QLoRA; GPU only).
        placement: "ddp" (the model on ``device``, one copy per rank) or "split" (its layers over
        every GPU with ``max_memory_gb`` each: one process).
    """
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification
    _refuse_head(head, answer_ids, num_labels)  # before any weight loads
    tokenizer = load_tokenizer(model_dir)
    pooling = pooledhead.sentence_pooling(model_dir) if head == "sequence" else None  # a sentence encoder's own
    kwargs = _loading(head if pooling is None else "encoder", num_labels, lora_r, load_in_4bit, placement,
                      max_memory_gb, device, precision)
    auto = AutoModel if pooling else AutoModelForSequenceClassification if head == "sequence" else AutoModelForCausalLM
    model = auto.from_pretrained(model_dir, **kwargs)
    model.config.pad_token_id = tokenizer.pad_token_id  # the sequence head's last real token: not padding
    if gradient_checkpointing:  # non-reentrant: works under DDP and with frozen inputs
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=NON_REENTRANT)
    if load_in_4bit:
        model = prepare_quantized(model, gradient_checkpointing)
    if lora_r:
        from peft import LoraConfig, TaskType, get_peft_model
        task = (TaskType.FEATURE_EXTRACTION if pooling else TaskType.SEQ_CLS if head == "sequence"
                else TaskType.CAUSAL_LM)
        model = get_peft_model(model, LoraConfig(
            task_type=task, r=lora_r, lora_alpha=lora_alpha or 2 * lora_r,
            lora_dropout=lora_dropout, target_modules="all-linear"))
    if pooling:  # its own pooling under a new head (fitted first on the frozen features: pooledhead.fit_head)
        model = pooledhead.PooledClassifier(model, num_labels, pooling)
    trained_in_fp32(model)
    return (AnswerTokenClassifier(model, answer_ids or []) if head == "answer_token" else model), tokenizer


def _refuse_head(head: str, answer_ids, num_labels: int) -> None:
    if head not in ("sequence", "answer_token"):
        raise ValueError(f"head={head!r}: 'sequence' (a classification head) or 'answer_token' (the causal "
                         "LM's logits of one answer token per class)")
    if head == "answer_token" and (not answer_ids or len(answer_ids) != num_labels):
        raise ValueError(f"head='answer_token' needs one answer token per class ({num_labels}): "
                         "answerhead.answer_token_ids(tokenizer, classes, answer_tokens)")


def _loading(head: str, num_labels: int, lora_r: int, load_in_4bit: bool, placement: str, max_memory_gb: float,
             device, precision) -> dict:
    """``from_pretrained``'s arguments: the base's type, the head's width, 4-bit and placement."""
    kwargs: dict[str, object] = {"dtype": frozen_dtype(lora_r, precision)}
    if head == "sequence":
        kwargs["num_labels"] = num_labels
    if load_in_4bit:
        from transformers import BitsAndBytesConfig
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float16)  # a T4 has no fast bf16
    if placement == "split":
        kwargs["device_map"] = "auto"
        kwargs["max_memory"] = {i: f"{max_memory_gb}GiB" for i in range(torch.cuda.device_count())}
    elif load_in_4bit:
        kwargs["device_map"] = {"": torch.device(device).index or 0}
    return kwargs


def trained_in_fp32(model) -> None:
    """Adapters and head in fp32 (peft copies the head in the base's 16-bit type). A head whose
    weights were cast up casts its input up too: without autocast (a run that fell back to fp32)
    the half base's hidden states would meet an fp32 weight and fail."""
    for module in model.modules():
        cast = [p for p in module.parameters(recurse=False) if p.requires_grad and p.dtype != torch.float32]
        for p in cast:
            p.data = p.data.float()
        if cast and isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(_inputs_in_fp32)


def _inputs_in_fp32(module, args):
    return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


def frozen_dtype(lora_r: int, precision=None) -> torch.dtype:
    """The base's type: fp32 when every weight trains (a GradScaler unscales fp32 gradients only)
    or the run computes in fp32; with LoRA the type the run's autocast computes in, half the
    memory (a 7B base: 14 GB instead of 28; on an emulated T4 the CPU's bf16)."""
    half = getattr(precision, "compute_dtype", None)
    return half if lora_r and half is not None else torch.float32


NON_REENTRANT = {"use_reentrant": False}


def prepare_quantized(model, gradient_checkpointing: bool):
    """peft's preparation of a 4-bit base for training (norms in fp32, input gradients), with
    the non-reentrant checkpointing kept: left to itself it enables checkpointing again with
    ``{}``, which torch runs reentrant, and reentrant checkpointing under DDP fails ("marked
    ready twice")."""
    from peft import prepare_model_for_kbit_training
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing,
                                           gradient_checkpointing_kwargs=NON_REENTRANT)


HEAD_NAMES = ("classifier", "score")  # a sequence classifier's new head in transformers (peft's modules_to_save)


def param_groups(model, lr: float, head_lr: float) -> list[dict]:
    """What trains, in two groups for AdamW: a new classification head at ``head_lr`` (it starts from
    nothing), the rest (the pretrained body, or its LoRA adapters) at ``lr`` (it starts from what it knows)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    is_head = [any(part in HEAD_NAMES for part in n.split(".")) for n, _ in named]
    groups = ({"params": [p for (_, p), h in zip(named, is_head) if not h], "lr": lr},
              {"params": [p for (_, p), h in zip(named, is_head) if h], "lr": head_lr})
    return [g for g in groups if g["params"]]


def parameter_counts(model) -> dict:
    """Parameters that train against all of them."""
    total = sum(p.numel() for p in model.parameters())
    trains = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable": trains, "total": total, "trainable_share": trains / max(total, 1)}


@torch.no_grad()
def predict_proba(model, texts: TokenizedTexts, collate, batch_size: int, device, autocast=None,
                  rank: int = 0, world: int = 1, limit_batches: int | None = None, int8: bool = False,
                  announce: str = "") -> np.ndarray:
    """Class probabilities of every text (float64, in the texts' order) on every rank.

    Texts sorted by length (each batch pads little), rank r of w takes every w-th batch, in
    ``autocast`` (the run's precision); the ranks' rows gathered by their index. ``int8``: an
    int8 copy predicts (CPU only, adapters merged first: ``machine.int8``). ``announce``: rank 0
    prints, after the first (longest) batch, how long the whole will take at most."""
    if int8:
        model, autocast = quantize(ranks.unwrap(model), device), None
    model.eval()
    order = np.argsort(texts.lengths, kind="stable")[::-1]
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)][rank::world]
    batches = batches[:limit_batches]  # the sandbox's work cap (rows beyond stay 0)
    rows, probs, started = [], [], time.monotonic()
    for idx in batches:
        batch = to_device(collate([{"input_ids": texts.ids[i]} for i in idx]), device)
        with autocast or torch.autocast(device.type, enabled=False):
            logits = model(**batch).logits
        probs.append(torch.softmax(logits.float(), dim=-1).double())
        rows.append(torch.as_tensor(idx.copy(), device=device))
        if announce and rank == 0 and len(probs) == 1:
            _estimate(announce, probs[0], time.monotonic() - started, len(batches), world)
    bare: Any = ranks.unwrap(model)
    width = getattr(bare, "num_labels", None) or bare.config.num_labels
    p = torch.cat(probs) if probs else torch.zeros((0, width), dtype=torch.float64, device=device)
    r = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long, device=device)
    p, r = metrics.gather(p, r)
    out = np.zeros((len(texts), width))
    out[r.cpu().numpy()] = p.cpu().numpy()
    return out


def _estimate(what: str, first: torch.Tensor, seconds: float, batches: int, world: int) -> None:
    """The scoring's time at most: its first batch is the longest (texts sorted by length)."""
    if first.is_cuda:
        torch.cuda.synchronize(first.device)
    print(f"{what}: {batches} batches on each of {world} rank(s), at most {seconds * batches:.0f} s "
          f"(the longest took {seconds:.2f} s)", flush=True)
