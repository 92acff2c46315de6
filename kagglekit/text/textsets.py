"""Built-in text data and stand-in pretrained models, in the layouts Kaggle ships them.

``write_competition``: a text-classification competition folder as Kaggle's text competitions
ship one: ``train.csv`` (id, text, label, and an extra column the model must not read),
``test.csv`` (id, text), ``sample_submission.csv`` (id and the label column, or one probability
column per class). Its quirks, each from real competitions: ids are strings, not row numbers;
labels are words; texts vary in length fivefold (the padding that length-grouped batches save);
a few texts carry punctuation and upper case.

The task depends on word order: each text tells of a bad and a good event (``storm`` ... ``calm``)
among filler words, and the label says which came last (``ends_well`` when the good one did).
Both orders hold the same words, so a bag of words (TF-IDF with bigrams: the events are never
adjacent) stays near chance, while a transformer, which sees positions, learns it from scratch.

``write_standin_model``: a small model of a real architecture (BERT; Llama and Qwen 3 as causal
LMs, lm_head included) created from its config with random weights, and a tokenizer trained on
the built-in texts with ``tokenizers`` that keeps the real one's special tokens and quirks (the
decoders have no padding token; Qwen adds no <s>), saved as ``save_pretrained`` writes a Kaggle
Model's files (``config.json``, ``model.safetensors``, ``tokenizer.json``), under
``<root>/<model>/transformers/<variation>/3`` (Kaggle Models'
``<model>/<framework>/<variation>/<version>``). Only this module and
``text.classifier`` import transformers: the other notebooks never pay for it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..machine.display import notice
from ..readers import csvfile, tablecheck
from ..state import atomic

if TYPE_CHECKING:  # pandas is imported where a table is read (import time)
    import numpy as np
    import pandas as pd

EVENTS = (("storm", "calm"), ("loss", "win"), ("fever", "recovery"), ("drought", "harvest"))
LABELS = ("ends_badly", "ends_well")
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "pa", "go", "fu")


def _filler(rng: random.Random, words: int = 240) -> list[str]:
    out = sorted({a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES})
    return rng.sample(out, words)


def texts(n: int, seed: int = 0, min_words: int = 6, max_words: int = 30) -> list[tuple[str, int]]:
    """``n`` (text, label) pairs; label 1 (``ends_well``) when the good event comes last."""
    rng = random.Random(seed)
    filler = _filler(random.Random(12345))  # the same vocabulary for every seed
    rows = []
    for _ in range(n):
        words = rng.choices(filler, k=rng.randint(min_words, max_words))
        bad, good = rng.choice(EVENTS)
        first, second = sorted(rng.sample(range(len(words) + 2), 2))
        if second - first < 2:  # never adjacent: no bigram holds the order
            second = min(first + 2 + rng.randint(0, 3), len(words) + 1)
            first = second - 2 - rng.randint(0, min(3, second - 2))
        label = rng.randint(0, 1)
        words.insert(first, good if label == 0 else bad)
        words.insert(second, bad if label == 0 else good)
        text = " ".join(words)
        if rng.random() < 0.05:  # a few texts as people write them
            text = text.capitalize() + rng.choice(["!", ".", "?!"])
        rows.append((text, label))
    return rows


def write_competition(folder: Path | str, train: int = 1600, test: int = 400, seed: int = 0,
                      probabilities: bool = False) -> Path:
    """The competition folder (see the module's docstring), written whole or not at all (once);
    ``probabilities``: the sample submission has one probability column per class instead of a
    label column. ``solution.csv`` (id, label, Usage) is what Kaggle publishes once a
    competition ends: the test accuracy, for the built-in task only."""
    return atomic.write_once(folder, _write_competition, train, test, seed, probabilities)


def _write_competition(partial: Path, train: int, test: int, seed: int, probabilities: bool) -> None:
    import pandas as pd
    rows = texts(train + test, seed)
    ids = [f"t{seed:02d}{i:05d}" for i in range(len(rows))]
    frame = pd.DataFrame({"id": ids, "text": [t for t, _ in rows],
                          "label": [LABELS[y] for _, y in rows],
                          "source": ["forum" if i % 3 else "review" for i in range(len(rows))]})
    frame.iloc[:train].to_csv(partial / "train.csv", index=False)
    frame.iloc[train:][["id", "text"]].to_csv(partial / "test.csv", index=False)
    solution = frame.iloc[train:][["id", "label"]].copy()
    solution["Usage"] = ["Public" if i % 2 else "Private" for i in range(len(solution))]
    solution.to_csv(partial / "solution.csv", index=False)
    sample = frame.iloc[train:][["id"]].copy()
    for name in (LABELS if probabilities else ["label"]):
        sample[name] = 0.5 if probabilities else LABELS[0]
    sample.to_csv(partial / "sample_submission.csv", index=False)


class TextDataError(ValueError):
    """A competition folder that does not hold what the parameters name."""


def row_fields(frame, names: list[str]) -> list[dict] | None:
    """The values of a prompt's other fields (``prompts.field_names``: Jigsaw's ``rule``) from
    ``frame``'s columns of those names, a dict per row; None when the prompt has none."""
    if not names:
        return None
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise TextDataError(f"prompt names {{{missing[0]}}}, which the table has no column for; its columns: "
                            f"{', '.join(map(str, frame.columns[:12]))}")
    return frame[names].fillna("").astype(str).to_dict("records")


@dataclass
class TextCompetition:
    """A text competition's files, read: the tables, the id column, the classes (sorted; their
    index is the label the model learns), and whether the sample wants a label or probabilities."""
    folder: Path
    train: pd.DataFrame
    test: pd.DataFrame
    sample: Path
    id_column: str
    target: str
    classes: list
    labels: np.ndarray  # class indices, one per train row
    wants: str  # "label", "probability" (of the second class, a binary target) or "probabilities"
    files: dict  # "train" / "test": where the tables were found (what caches and checkpoints key on)
    text_column: str = "text"

    def fields(self, frame, names: list[str]) -> list[dict] | None:
        """A prompt's other fields from ``frame`` (``row_fields``)."""
        return row_fields(frame, names)

    def submission(self, probs):
        """The submission in the sample's columns: the class (as the data names it) of the
        highest probability, the second class's probability (a binary target whose sample holds
        fractions), or one probability column per class."""
        import pandas as pd
        frame = pd.DataFrame({self.id_column: self.test[self.id_column].to_numpy()})
        if self.wants == "label":
            frame[self.target] = [self.classes[i] for i in probs.argmax(1)]
        elif self.wants == "probability":
            frame[self.target] = probs[:, 1]
        else:
            for i, name in enumerate(self.classes):
                frame[str(name)] = probs[:, i]
        return frame


def labelled_examples(data: TextCompetition, spec: str) -> tuple[pd.DataFrame, np.ndarray, int]:
    """The rows train.csv and test.csv label by a column, ``spec`` = "column:class,..." (Jigsaw
    2025: ``positive_example_1:1,negative_example_1:0``): what test-time training adds to every
    fold's training, as (a table of rows, their class indices, how many came from test.csv). A
    row is its source row with the example in the text column: its other columns (the rule it
    exemplifies) fill the prompt as the training rows' do. Empty cells and repeats are dropped, and
    so is an example equal to a training text: it would carry that row's label into the folds
    that validate on it."""
    import numpy as np
    import pandas as pd
    rows, labels, from_test = [], [], 0
    index = {str(c): i for i, c in enumerate(data.classes)}
    seen = set(data.train[data.text_column])
    for part in spec.split(",") if spec else ():
        column, _, label = part.strip().rpartition(":")
        if label not in index:
            raise TextDataError(f"test_examples: {part.strip()!r} must be column:class with a class of "
                                f"{data.target!r} ({', '.join(index)})")
        if column not in data.test.columns:
            raise TextDataError(f"test_examples names {column!r}, which test.csv does not have; its columns: "
                                f"{', '.join(map(str, data.test.columns[:12]))}")
        for frame in (data.train, data.test):
            for row in frame.to_dict("records") if column in frame.columns else ():
                text = "" if pd.isna(row[column]) else str(row[column])
                if text.strip() and text not in seen:
                    seen.add(text)
                    rows.append({**row, data.text_column: text})
                    labels.append(index[label])
                    from_test += frame is data.test
    examples = pd.DataFrame(rows) if rows else data.train.iloc[:0].copy()  # none: the training table's columns
    return examples, np.asarray(labels, dtype=np.int64), from_test


def table(folder: Path, name: str, kind: str = "text", error: type[ValueError] = TextDataError):
    """``name`` (train.csv, test.csv or sample_submission.csv) nearest the top of ``folder``,
    read, and where it was; ``error`` naming the files a ``kind`` competition's folder has."""
    found = sorted(folder.rglob(name), key=lambda p: len(p.parts))
    if not found:
        raise error(f"{folder} holds no {name}: a {kind} competition's folder has train.csv, "
                    "test.csv and sample_submission.csv")
    return csvfile.read(found[0], rows_needed=name != "test.csv"), found[0]


def read_competition(folder: Path | str, text_column: str, target_column: str) -> TextCompetition:
    """``train.csv`` / ``test.csv`` / ``sample_submission.csv`` anywhere under ``folder``; a
    missing column is named with the columns there are; empty texts become ""."""
    import numpy as np
    folder = Path(folder)
    (train, train_path), (test, test_path), (sample, sample_path) = (
        table(folder, n) for n in ("train.csv", "test.csv", "sample_submission.csv"))
    for name, frame, wanted in (("train.csv", train, [text_column, target_column]),
                                ("test.csv", test, [text_column])):
        missing = [c for c in wanted if c not in frame.columns]
        if missing:
            raise TextDataError(f"{name} has no column {missing[0]!r} (text_column / target_column); "
                                f"its columns: {', '.join(map(str, frame.columns[:12]))}")
    id_column = str(sample.columns[0])  # the competition's key, as the sample names it
    if id_column not in test.columns:
        raise TextDataError(f"sample_submission.csv's first column {id_column!r} is not in test.csv")
    tablecheck.check_ids(sample, test, id_column, TextDataError)
    answered, note = tablecheck.labelled(train[target_column], target_column, TextDataError)
    if note:
        notice(note)
    train = train[answered].reset_index(drop=True)
    train[text_column] = train[text_column].fillna("").astype(str)
    test[text_column] = test[text_column].fillna("").astype(str)
    classes, labels = np.unique(train[target_column].to_numpy(), return_inverse=True)
    classes = classes.tolist()
    if target_column in sample.columns and sample[target_column].dtype.kind == "f" and len(classes) == 2:
        wants = "probability"  # a binary target scored by AUC or log loss: the positive class's
    elif target_column in sample.columns:
        wants = "label"
    elif all(str(c) in sample.columns for c in classes):
        wants = "probabilities"
    else:
        raise TextDataError(f"sample_submission.csv has neither a {target_column!r} column nor one "
                            f"column per class ({', '.join(map(str, classes[:6]))}): its columns "
                            f"{', '.join(map(str, sample.columns))}")
    return TextCompetition(folder, train, test, sample_path, id_column, target_column, classes,
                           labels, wants, {"train": train_path, "test": test_path}, text_column)


def _tokenizer(corpus: list[str], arch: str):
    """A word-level tokenizer trained on ``corpus`` with the special tokens ``arch``'s real
    tokenizers have: BERT's [CLS] ... [SEP] and [PAD]; Llama 3's <s> before each text and no
    padding token; Qwen's no <s> at all, <|endoftext|> as its end, and no padding token (the
    base checkpoints ship none: ``text.classifier.load_tokenizer`` must supply one)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    specials = {"bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "llama": ["<unk>", "<s>", "</s>"],
                "qwen": ["<unk>", "<|endoftext|>"]}[arch]
    tok = Tokenizer(models.WordLevel(unk_token=specials[1] if arch == "bert" else specials[0]))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(corpus + [PROMPT_WORDS], trainers.WordLevelTrainer(special_tokens=specials))
    ids = {s: tok.token_to_id(s) for s in specials}
    if arch == "bert":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
        return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                       cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    if arch == "llama":
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", ids["<s>"])])
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|endoftext|>")


# Words of a prompt and its answers (the answer-token head's), in the stand-ins' vocabulary as
# in any real model's.
PROMPT_WORDS = "story text : does it end well ? answer yes no . ! , section"


def _config(arch: str, tokenizer, hidden: int, layers: int):
    from transformers import BertConfig, LlamaConfig, Qwen3Config
    vocab = len(tokenizer)
    if arch == "bert":
        # no dropout: a model trained from scratch in a few epochs (pretrained BERTs have 0.1)
        return BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                          num_attention_heads=4, intermediate_size=2 * hidden,
                          max_position_embeddings=256, pad_token_id=tokenizer.pad_token_id,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    decoder = {"vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": 4,
               "num_key_value_heads": 2, "intermediate_size": 2 * hidden, "max_position_embeddings": 256,
               "eos_token_id": tokenizer.eos_token_id, "tie_word_embeddings": False}
    if arch == "llama":  # no pad_token_id, as Llama 3's config
        return LlamaConfig(**decoder, bos_token_id=tokenizer.bos_token_id)
    if arch == "qwen":
        return Qwen3Config(**decoder, head_dim=hidden // 4)
    raise ValueError(f"stand-in architecture {arch!r}: 'bert' (an encoder), 'llama' or 'qwen' (decoders)")


def write_standin_model(root: Path | str, arch: str = "bert", seed: int = 0, hidden: int = 64,
                        layers: int = 2, corpus: list[str] | None = None) -> Path:
    """A stand-in pretrained model in Kaggle Models' layout; returns its version folder.
    Written once per (arch, size, seed): a later call finds it."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM

    from ..readers.pretrained import quiet_transformers
    quiet_transformers()
    folder = Path(root) / f"standin-{arch}" / "transformers" / f"h{hidden}-l{layers}-s{seed}" / "3"
    if (folder / "config.json").exists() and (folder / "tokenizer.json").exists():
        return folder
    tokenizer = _tokenizer(corpus or [t for t, _ in texts(4000, seed)], arch)
    torch.manual_seed(seed)
    config = _config(arch, tokenizer, hidden, layers)
    # a decoder as its causal LM (with lm_head: the answer-token head reads it), as Kaggle Models hold them
    model = (AutoModel if arch == "bert" else AutoModelForCausalLM).from_config(config)
    with atomic.atomic_folder(folder) as partial:  # a killed writer leaves no half model to load
        model.save_pretrained(partial)  # config.json, model.safetensors: what a Kaggle Model holds
        tokenizer.save_pretrained(partial)
    return folder


def solution_labels(data: TextCompetition):
    """The test texts' class indices from the ``solution.csv`` (id, the target, Usage) Kaggle publishes
    when a competition ends, found anywhere in the competition's folder, in the order of ``data.test``;
    None when there is none."""
    import numpy as np
    import pandas as pd
    path = next(Path(data.folder).rglob("solution.csv"), None)
    if path is None:
        return None
    solution = pd.read_csv(path).set_index(data.id_column)[data.target]
    index = {c: i for i, c in enumerate(data.classes)}
    return np.array([index[v] for v in solution.loc[data.test[data.id_column]]])
