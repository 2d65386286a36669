"""Unlabeled passages for span self-distillation: read texts, cut them into passages, keep dev text out."""

from __future__ import annotations

import csv
import json
import os
import random
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from slice_st import text as text_files
from slice_st._extras import needs_extra
from slice_st.data.stsb import read_stsb, read_stsb_context
from slice_st.errors import DataFormatError, SpanInputError
from slice_st.text import one_line, split_sentences

if TYPE_CHECKING:
    from datasets import Dataset


def read_texts(source: Any, *, field: str = "text") -> list[str]:
    """Texts from a file, a saved ``datasets`` folder or an iterable of strings, blank ones skipped.

    Files: ``.jsonl``/``.json`` (``field`` of each object), ``.tsv`` (the last column), anything else a text per line.

    >>> read_texts(["A first text.", "  ", "A second one."])
    ['A first text.', 'A second one.']
    """
    texts: list[str]
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if os.path.isdir(path):
            with needs_extra("train", "reading a saved dataset"):
                import datasets
            dataset = datasets.load_from_disk(path)
            if getattr(dataset.features.get(field), "dtype", None) not in ("string", "large_string"):
                raise DataFormatError(f"{path}: no string column {field!r}; columns: {dataset.column_names}.")
            texts = list(dataset[field])  # None (a missing value) is skipped below
        elif not os.path.exists(path):
            raise FileNotFoundError(f"No such file or folder: {path}")
        elif path.endswith(".json"):
            texts = _read_json_list_texts(path, field)
        elif path.endswith(".tsv"):
            with open(path, encoding="utf-8", newline="") as handle:
                texts = [row[-1] for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if row]
        else:
            fmt = "jsonl" if path.endswith(".jsonl") else "text"
            texts = [record.text for record in text_files.read_texts([path], fmt=fmt, text_field=field)]
    else:
        texts = list(source)
        for position, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {position} is {type(text).__name__}, not a string.")
    return [one_line(text) for text in texts if text and text.strip()]


def _read_json_list_texts(path: str, field: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        try:
            rows = json.load(handle)
        except json.JSONDecodeError as error:
            raise DataFormatError(f"{path}: not valid JSON ({error}).") from None
    if not isinstance(rows, list):
        raise DataFormatError(f"{path}: expected a JSON list of objects.")
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or not isinstance(row.get(field), str):
            raise DataFormatError(f"{path}, row {number}: expected an object with a string {field!r} field.")
    return [row[field] for row in rows]


def cut_passages(
    texts: Iterable[str],
    *,
    min_words: int = 20,
    max_words: int = 80,
    exclude_sentences: Iterable[str] = (),
    seed: int = 0,
    limit: int | None = None,
) -> Dataset:
    """Pack sentences into passages of ``min_words..max_words`` words → ``Dataset`` with a ``text`` column.

    A text of at least ``min_words`` words is cut into passages of consecutive sentences, each of a seeded random
    length in the range (longer sentences are cut into word chunks); shorter texts are shuffled (seeded) and glued
    the same way. Sentences in ``exclude_sentences`` (up to case and spaces) are removed first, duplicates dropped;
    ``limit`` keeps a seeded sample.

    >>> ds = cut_passages(["One two three. Four five six.", "Seven eight. Nine ten.", "Eleven twelve."], min_words=4,
    ...     max_words=6)
    >>> sorted(len(text.split()) for text in ds["text"])   # two documents; "Eleven twelve." is too short alone
    [4, 6]
    """
    with needs_extra("train", "building passages"):
        import datasets

    if not 1 <= min_words <= max_words:
        raise SpanInputError(f"need 1 <= min_words <= max_words (--min-words, --max-words): {min_words}, {max_words}.")
    rng = random.Random(seed)
    excluded = {" ".join(sentence.lower().split()) for sentence in exclude_sentences}
    passages, short, leftovers, removed = [], [], [], 0
    for text in texts:
        sentences = split_sentences(text)
        kept = [sentence for sentence in sentences if " ".join(sentence.lower().split()) not in excluded]
        removed += len(sentences) - len(kept)
        if sum(len(sentence.split()) for sentence in kept) >= min_words:
            passages += _pack(kept, min_words, max_words, rng, short)
        else:
            short += kept
    rng.shuffle(short)
    passages += _pack(short, min_words, max_words, rng, leftovers)
    if len(" ".join(leftovers).split()) >= min_words:  # the last glued piece, if long enough on its own
        passages.append(" ".join(leftovers))
    unique = list(dict.fromkeys(passages))
    if limit is not None:
        unique = rng.sample(unique, min(limit, len(unique)))
    dataset = datasets.Dataset.from_dict({"text": unique})
    dataset.info.description = (
        f"{len(unique)} passages of {min_words}-{max_words} words; {removed} excluded sentence(s) removed."
    )
    return dataset


def _pack(sentences: Sequence[str], min_words: int, max_words: int, rng: random.Random, spill: list[str]) -> list[str]:
    """Consecutive sentences → passages; a short final piece joins the previous passage or ``spill``."""
    split = [sentence.split() for sentence in sentences]  # sentences over max_words are cut into word chunks
    pieces = [" ".join(words[lo : lo + max_words]) for words in split for lo in range(0, len(words), max_words)]
    passages, current, count, target = [], [], 0, rng.randint(min_words, max_words)
    for piece in pieces:
        size = len(piece.split())
        if current and count + size > max_words:  # the next piece would overflow: close (or spill) this passage
            if count >= min_words:
                passages.append(" ".join(current))
            else:
                spill += current
            current, count, target = [], 0, rng.randint(min_words, max_words)
        current.append(piece)
        count += size
        if count >= target:
            passages.append(" ".join(current))
            current, count, target = [], 0, rng.randint(min_words, max_words)
    if current:
        if count >= min_words:
            passages.append(" ".join(current))
        elif passages and len(passages[-1].split()) + count <= max_words:
            passages[-1] = passages[-1] + " " + " ".join(current)
        else:
            spill += current
    return passages


def evaluation_sentences(paths: Iterable[str | os.PathLike]) -> set[str]:
    """Every sentence of evaluation files (STS-B-Context or STS-B TSVs), to keep out of training text."""
    sentences: set[str] = set()
    for path in paths:
        with open(path, "rb") as handle:
            head = handle.readline()
        if b"passage" in head and b"paraphrase" in head:
            for row in read_stsb_context(path):
                sentences.update((row["line"], row["paraphrase"]))
                sentences.update(split_sentences(row["passage"]))
        else:
            for row in read_stsb(path):
                sentences.update((row["sentence1"], row["sentence2"]))
    return sentences


def load_passages(
    sources: Sequence[str],
    *,
    exclude_paths: Sequence[str] = (),
    min_words: int = 20,
    max_words: int = 80,
    seed: int = 0,
    limit: int | None = None,
) -> Dataset:
    """Distillation text for ``slice-st train --distill-data``, shuffled: saved ``datasets`` folders (used as they are;
    a ``text`` column) and text/TSV/JSONL files (cut into passages without the sentences of ``exclude_paths``)."""
    with needs_extra("train", "distillation passages"):
        import datasets

    parts = []
    for source in sources:
        if os.path.isdir(source):
            parts.append(datasets.load_from_disk(source))
            if "text" not in (columns := parts[-1].column_names):
                raise DataFormatError(f"{source}: a distillation dataset needs a 'text' column; columns: {columns}.")
    files = [source for source in sources if not os.path.isdir(source)]
    if files:
        texts = [text for path in files for text in read_texts(path)]
        words = {"min_words": min_words, "max_words": max_words}
        parts.append(cut_passages(texts, **words, exclude_sentences=evaluation_sentences(exclude_paths), seed=seed))
    if not parts:
        raise DataFormatError("no distillation text: give --distill-data a saved dataset folder or text/JSONL files.")
    columns = ["text", "label"] if all("label" in part.column_names for part in parts) else ["text"]
    dataset = datasets.concatenate_datasets([part.select_columns(columns) for part in parts]).shuffle(seed=seed)
    return dataset if limit is None else dataset.select(range(min(limit, len(dataset))))
