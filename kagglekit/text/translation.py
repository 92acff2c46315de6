"""A text-generation competition folder (translation, summaries, answers written out), read; and a
built-in one in the same layout.

``read_competition``: ``train.csv`` (an id, the source text, the reference text), ``test.csv``
(an id, the source) and ``sample_submission.csv`` (the id and the column the answer goes in,
whatever the competition names it) anywhere under the folder; a missing column is named with
the columns there are, empty cells read as "".

``write_competition``: a made-up language into English words. Each source word has a translation
in a lexicon and English puts the words in the reverse order, so a word-for-word dictionary gets
the words but not their order, which BLEU's n-grams punish. Its quirks, each from real
translation and generation competitions:
- ids are strings (``s00a0012``), not row numbers;
- the reference column is ``target`` in train.csv and ``translation`` in sample_submission.csv;
- a few sources carry upper case and end punctuation (``Kalomi rusavi.``) that the references
  do not;
- a fifth of the source words have two translations, drawn anew for every sentence (synonyms:
  references disagree as human translators do, so no model scores 100);
- a source sentence repeated in train.csv with differing references;
- an extra column (``genre``) the model must not read;
- test sources up to two words longer than any in training (length generalisation);
- ``solution.csv`` (id, translation, Usage) as Kaggle publishes one when a competition ends.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..readers import csvfile, tablecheck
from ..state import atomic
from .textsets import row_fields, table

if TYPE_CHECKING:
    import pandas as pd

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "pa", "go", "fu")
ENGLISH = ("sun moon tree river stone bird fish wind fire rain snow king queen child horse dog cat house road "
           "ship city field bread wine salt gold iron wood hill lake sea star sky cloud leaf root seed flower "
           "grass sand boat door wall bell book song voice hand eye heart night day year path gate tower bridge "
           "garden forest island valley mountain storm light shadow").split()
SYNONYMS = (("sun", "daystar"), ("river", "stream"), ("stone", "rock"), ("child", "kid"), ("road", "way"),
            ("ship", "vessel"), ("city", "town"), ("field", "meadow"), ("hill", "mound"), ("sea", "ocean"),
            ("sky", "heavens"), ("boat", "skiff"), ("path", "trail"), ("forest", "woods"))  # (word, its synonym)
PROMPT = "translate : {text} ->"


def lexicon(seed: int = 12345) -> dict[str, str]:
    """The made-up language's words and their English translations (the same for every data seed)."""
    rng = random.Random(seed)
    words = sorted({a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES})
    rng.shuffle(words)
    return dict(zip(words[:len(ENGLISH)], ENGLISH))


def sentences(n: int, seed: int = 0, min_words: int = 3, max_words: int = 9) -> list[tuple[str, str]]:
    """``n`` (source, reference) pairs: the reference is the words translated, in reverse order,
    each word with a synonym drawing its second translation 40% of the time."""
    rng, words, synonyms = random.Random(seed), lexicon(), dict(SYNONYMS)
    source_words = sorted(words)
    rows = []
    for _ in range(n):
        source = rng.choices(source_words, k=rng.randint(min_words, max_words))
        english = [words[w] for w in reversed(source)]
        english = [synonyms[w] if w in synonyms and rng.random() < 0.4 else w for w in english]
        text = " ".join(source)
        if rng.random() < 0.05:  # a few sources as people type them
            text = text.capitalize() + rng.choice([".", "!", " ?"])
        rows.append((text, " ".join(english)))
    return rows


def vocabulary() -> list[str]:
    """Every word the built-in task uses (what a stand-in's tokenizer is trained on)."""
    return [" ".join(lexicon()), " ".join(ENGLISH), " ".join(s for _, s in SYNONYMS), PROMPT.format(text="")]


def write_competition(folder: Path | str, train: int = 2000, test: int = 300, seed: int = 0) -> Path:
    """The built-in competition (see the module's docstring), written whole or not at all, once."""
    return atomic.write_once(folder, _write_competition, train, test, seed)


def _write_competition(partial: Path, train: int, test: int, seed: int) -> None:
    import pandas as pd
    rows = sentences(train, seed) + sentences(test, seed + 1, max_words=11)
    rows[1] = (rows[0][0], sentences(1, seed + 2)[0][1])  # a repeated source, another reference
    ids = [f"s{seed:02d}{'ab'[i % 2]}{i:04d}" for i in range(len(rows))]
    frame = pd.DataFrame({"id": ids, "source": [s for s, _ in rows], "target": [t for _, t in rows],
                          "genre": ["saga" if i % 3 else "letter" for i in range(len(rows))]})
    frame.iloc[:train].to_csv(partial / "train.csv", index=False)
    tests = frame.iloc[train:]
    tests[["id", "source"]].to_csv(partial / "test.csv", index=False)
    solution = tests[["id"]].assign(translation=tests["target"].to_numpy())
    solution["Usage"] = ["Public" if i % 2 else "Private" for i in range(len(solution))]
    solution.to_csv(partial / "solution.csv", index=False)
    tests[["id"]].assign(translation="the sun").to_csv(partial / "sample_submission.csv", index=False)


class GenerationDataError(ValueError):
    """A competition folder that does not hold what the parameters name."""


@dataclass
class GenerationCompetition:
    """A generation competition's tables: sources and references, the id column and the column
    the sample submission wants the answer in."""
    folder: Path
    train: pd.DataFrame
    test: pd.DataFrame
    sample: Path
    id_column: str
    source: str
    target: str
    answer_column: str  # the sample submission's column for the generated text
    files: dict  # "train" / "test": where the tables were found
    empty_targets: int = 0  # training rows without a reference answer (dropped: nothing to learn to write)

    def fields(self, frame, names: list[str]) -> list[dict] | None:
        """A prompt's other fields from each row's columns of that name (``textsets.row_fields``)."""
        return row_fields(frame, names)

    def submission(self, texts: list[str]):
        """The submission in the sample's columns: each test row's id and its text."""
        import pandas as pd
        if len(texts) != len(self.test):
            raise ValueError(f"{len(texts)} texts for {len(self.test)} test rows")
        return pd.DataFrame({self.id_column: self.test[self.id_column].to_numpy(), self.answer_column: texts})

    def solution(self) -> list[str] | None:
        """The test references in ``test``'s order from a ``solution.csv``, when the folder has one."""
        found = next(self.folder.rglob("solution.csv"), None)
        if found is None:
            return None
        solved = csvfile.read(found).set_index(self.id_column)
        column = self.answer_column if self.answer_column in solved.columns else solved.columns[0]
        return solved.loc[self.test[self.id_column], column].fillna("").astype(str).tolist()


def read_competition(folder: Path | str, source_column: str, target_column: str) -> GenerationCompetition:
    """The tables under ``folder`` (see the module's docstring)."""
    folder = Path(folder)
    (train, train_path), (test, test_path), (sample, sample_path) = (
        table(folder, n, "generation", GenerationDataError) for n in ("train.csv", "test.csv", "sample_submission.csv"))
    for name, frame, wanted in (("train.csv", train, [source_column, target_column]),
                                ("test.csv", test, [source_column])):
        missing = [c for c in wanted if c not in frame.columns]
        if missing:
            raise GenerationDataError(f"{name} has no column {missing[0]!r} (source_column / target_column); "
                                      f"its columns: {', '.join(map(str, frame.columns[:12]))}")
    id_column = str(sample.columns[0])
    if id_column not in test.columns:
        raise GenerationDataError(f"sample_submission.csv's first column {id_column!r} is not in test.csv")
    if len(sample.columns) < 2:
        raise GenerationDataError("sample_submission.csv has only its id column: no column for the answer")
    tablecheck.check_ids(sample, test, id_column, GenerationDataError)
    answer = target_column if target_column in sample.columns else str(sample.columns[1])
    for frame, columns in ((train, (source_column, target_column)), (test, (source_column,))):
        for column in columns:
            frame[column] = frame[column].fillna("").astype(str)
    empty = train[target_column].str.strip() == ""
    if empty.all():
        raise GenerationDataError(f"train.csv's {target_column!r} (target_column) is empty in all {len(train)} rows: "
                                  "no reference answer to learn to write. Name the column that holds the answers; "
                                  f"its columns: {', '.join(map(str, train.columns[:12]))}")
    return GenerationCompetition(folder, train[~empty].reset_index(drop=True), test, sample_path, id_column,
                                 source_column, target_column, answer, {"train": train_path, "test": test_path},
                                 int(empty.sum()))
