"""Prompts: each text in a template, cut to fit inside it, the template's other fields from its row.

A competition's rows carry more than the text: Jigsaw 2025 judges a comment against a ``rule``
(and its ``subreddit``), and the winners' prompts named both. ``{text}`` is the text the model
reads, cut when the whole is too long; every other ``{field}`` is filled from the row's column of
that name (``TextCompetition.fields``) and kept whole.
"""
from __future__ import annotations


def field_names(template: str) -> list[str]:
    """The prompt's fields other than ``{text}`` (Jigsaw 2025's ``{rule}``, ``{subreddit}``)."""
    import string
    names = [name for _, name, _, _ in string.Formatter().parse(template) if name]
    return list(dict.fromkeys(n for n in names if n != "text"))


def check(template: str, fields, count: int) -> None:
    """Refuses a template without ``{text}``, or one whose other fields have no values per text."""
    if "{text}" not in template:
        raise ValueError(f"prompt={template!r} has no {{text}}: write where the text goes, e.g. "
                         "'Text: {text}\nAnswer:'")
    wanted = field_names(template)
    if wanted and (fields is None or len(fields) != count or any(set(wanted) - set(f) for f in fields[:1])):
        raise ValueError(f"prompt={template!r} names {', '.join('{' + n + '}' for n in wanted)}: give their values "
                         "per text (fields=, from the table's columns: TextCompetition.fields)")


def _fill(template: str, values: dict) -> str:
    for name, value in values.items():  # before the text: a text holding "{rule}" stays as written
        template = template.replace("{" + name + "}", str(value))
    return template


def fit_into(tokenizer, texts: list[str], template: str, max_length: int, fields=None) -> list[str]:
    """``template`` around each text (its fields filled), the text cut to the tokens the prompt leaves free."""
    prompts = [_fill(template, fields[i] if fields else {}) for i in range(len(texts))]
    frames = {p: len(tokenizer(p.replace("{text}", ""))["input_ids"]) for p in set(prompts)}  # rules repeat
    if max_length - max(frames.values()) < 1:
        raise ValueError(f"prompt takes up to {max(frames.values())} of max_length={max_length} tokens: no room for "
                         "the text; raise max_length or shorten the prompt (or its fields)")
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    room = [max_length - frames[p] for p in prompts]
    cut = [t if len(i) <= r else tokenizer.decode(i[:r]) for t, i, r in zip(texts, ids, room)]
    return [p.replace("{text}", t) for p, t in zip(prompts, cut)]


def as_read(tokenizer, data) -> list[str]:
    """The prompts of ``data`` (``TokenizedTexts``) as its ids read them, for an engine that tokenizes for
    itself (an LLM engine): a text that only the tokenizer's truncation cut (template ``{text}``) is cut as a
    string too. Asked for, not made with every dataset: only the engine's test texts need it."""
    template, max_length = data.cut
    if template != "{text}" or all(len(i) < max_length for i in data.ids):
        return data.texts
    return fit_into(tokenizer, data.texts, template, max_length)
