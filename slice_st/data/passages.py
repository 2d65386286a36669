"""Unlabeled passages for span self-distillation: read texts, cut them into passages, keep dev text out."""

from __future__ import annotations

import csv
import json
import os
import random
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from slice_st import text as text_files
from slice_st._extras import needs_extra
from slice_st.data.corpus import check_distinct_files
from slice_st.data.stsb import read_stsb, read_stsb_context
from slice_st.errors import DataFormatError, SpanInputError
from slice_st.files import expand_paths, file_lines, is_jsonl
from slice_st.text import guess_split, one_line, split_sentences

if TYPE_CHECKING:
    from datasets import Dataset

#: A blank line (spaces allowed): a paragraph ends there.
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")


def read_texts(
    source: Any,
    *,
    field: str = "text",
    split: str = "auto",
    report: Callable[[str, str], None] | None = None,
) -> list[str]:
    """Texts from a file, a saved ``datasets`` folder or an iterable of strings, blank ones skipped.

    Files: ``.jsonl``/``.json`` (``field`` of each object), ``.tsv`` (the last column), anything else (``"-"``:
    standard input) is read as ``slice-st mine`` reads it (:func:`slice_st.text.read_texts`): a text per line, or
    with ``split="paragraph"`` (or ``"auto"`` on a file whose lines are hard-wrapped) the whole file as one text, its
    paragraphs kept apart by a blank line, so that passages are cut from it in order. ``report(path, how)`` hears
    what ``"auto"`` chose (``"line"``, ``"paragraph"``), and ``"wrapped-lines"`` for a file read by lines whose lines
    are hard-wrapped.

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
            kind = getattr(dataset.features.get(field), "dtype", None)
            if kind not in ("string", "large_string"):
                raise DataFormatError(
                    f"{path}: no string column {field!r}; columns: {dataset.column_names}."
                )
            texts = list(dataset[field])  # None (a missing value) is skipped below
        elif path != "-" and not os.path.exists(path):  # "-": standard input, read as a text file
            raise FileNotFoundError(f"No such file or folder: {path}")
        elif path.endswith(".json"):
            texts = _read_json_list_texts(path, field)
        elif path.endswith(".tsv"):
            with open(path, encoding="utf-8", newline="") as handle:
                rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
                texts = [row[-1] for row in rows if row]
        elif is_jsonl(path):
            records = text_files.read_texts([path], fmt="jsonl", text_field=field)
            texts = [record.text for record in records]
        else:
            texts = _read_text_file(path, split, report)
    else:
        texts = list(source)
        for position, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {position} is {type(text).__name__}, not a string.")
    return [_tidy(text) for text in texts if text and text.strip()]


def _read_text_file(path: str, split: str, report: Callable[[str, str], None] | None) -> list[str]:
    """A text per line, or the file as one text of paragraphs; ``report`` hears of hard-wrapped lines read as lines."""
    modes: list[str] = []
    records = text_files.read_texts(
        [path], split, fmt="text", report=lambda _, mode: modes.append(mode)
    )
    mode = modes[0] if modes else split
    if split == "auto" and report is not None:
        report(path, mode)
    if mode == "paragraph":
        return ["\n\n".join(one_line(record.text) for record in records)]
    # stdin: read once
    lines = (raw for _, _, raw in file_lines(path)) if split == "line" and path != "-" else None
    if report is not None and lines is not None and guess_split(lines) == "paragraph":
        report(path, "wrapped-lines")
    return [record.text for record in records]


def _tidy(text: str) -> str:
    """``text`` on one line per paragraph (runs of spaces and wrapping line breaks made one space), paragraphs
    separated by one blank line: a sentence never runs across a paragraph break."""
    paragraphs = (one_line(paragraph) for paragraph in _PARAGRAPH_BREAK.split(text))
    return "\n\n".join(paragraph for paragraph in paragraphs if paragraph)


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
            raise DataFormatError(
                f"{path}, row {number}: expected an object with a string {field!r} field."
            )
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

    A text of at least ``min_words`` words (a document: a file read by paragraphs is one) is cut into passages of its
    consecutive sentences, each of a seeded random length in the range, so every passage is a stretch of one text; a
    sentence is cut only where a passage would otherwise stay under ``min_words`` or pass ``max_words``, and a last
    piece too short for a passage of its own joins (or is shared with) the one before it. Shorter texts (lines read
    one per text) are shuffled (seeded) and glued the same way. Sentences in ``exclude_sentences`` (up to case and
    spaces) are removed first, duplicates dropped; ``limit`` keeps a seeded sample.

    >>> ds = cut_passages(["One two three. Four five six.", "Seven eight. Nine ten.", "Eleven twelve."], min_words=4,
    ...     max_words=6)
    >>> sorted(len(text.split()) for text in ds["text"])   # two documents; "Eleven twelve." is too short alone
    [4, 6]
    """
    with needs_extra("train", "building passages"):
        import datasets

    if not 1 <= min_words <= max_words:
        raise SpanInputError(
            f"need 1 <= min_words <= max_words (--min-words, --max-words): {min_words}, {max_words}."
        )
    rng = random.Random(seed)
    excluded = {" ".join(sentence.lower().split()) for sentence in exclude_sentences}
    passages, short, removed = [], [], 0
    for text in texts:
        sentences = split_sentences(text)  # a paragraph break ends a sentence
        kept = [
            sentence for sentence in sentences if " ".join(sentence.lower().split()) not in excluded
        ]
        removed += len(sentences) - len(kept)
        if sum(len(sentence.split()) for sentence in kept) >= min_words:
            passages += _pack(kept, min_words, max_words, rng)
        else:
            short += kept
    rng.shuffle(short)
    passages += _pack(short, min_words, max_words, rng)
    unique = list(dict.fromkeys(passages))
    if limit is not None:
        unique = rng.sample(unique, min(limit, len(unique)))
    dataset = datasets.Dataset.from_dict({"text": unique})
    dataset.info.description = (
        f"{len(unique)} passages of {min_words}-{max_words} words; "
        f"{removed} excluded sentence(s) removed."
    )
    return dataset


def _pack(
    sentences: Sequence[str], min_words: int, max_words: int, rng: random.Random
) -> list[str]:
    """Consecutive sentences → passages, in order, each ending where it reaches a seeded target length."""
    passages: list[list[str]] = []
    current: list[str] = []
    target = rng.randint(min_words, max_words)
    for sentence in sentences:
        words = sentence.split()
        while words:
            if len(current) + len(words) <= max_words:  # the whole (rest of the) sentence fits
                current, words = current + words, []
            elif len(current) >= min_words:  # it would overflow: this passage ends before it
                target = len(current)
            else:  # too short to end here: the sentence is cut at the target
                take = target - len(current)
                current, words = current + words[:take], words[take:]
            if len(current) >= target:
                passages.append(current)
                current, target = [], rng.randint(min_words, max_words)
    # a short end: joins the last passage, or shares it
    if current and len(current) < min_words and passages:
        both = passages.pop() + current
        if len(both) <= max_words:
            passages.append(both)
        elif len(both) >= 2 * min_words:
            passages += [both[:-min_words], both[-min_words:]]
        else:
            # too few words for two passages: the end is left out
            passages.append(both[: -len(current)])
    elif len(current) >= min_words:
        passages.append(current)
    return [" ".join(words) for words in passages]


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
    split: str = "auto",
    follow_links: bool = False,
    report: Callable[[str, str], None] | None = None,
) -> Dataset:
    """Distillation text for ``slice-st train --distill-data``, shuffled: saved ``datasets`` folders (used as they are;
    a ``text`` column) and text/TSV/JSONL files, folders of them or glob patterns, read as ``slice-st mine`` reads them
    (:func:`read_texts`; ``split``, ``follow_links``, ``report``) and cut into passages (:func:`cut_passages`) without
    the sentences of ``exclude_paths``."""
    with needs_extra("train", "distillation passages"):
        import datasets

    parts = []
    for source in filter(is_saved_dataset, sources):
        parts.append(datasets.load_from_disk(source))
        if "text" not in (columns := parts[-1].column_names):
            raise DataFormatError(
                f"{source}: a distillation dataset needs a 'text' column; columns: {columns}."
            )
    files = [source for source in sources if not is_saved_dataset(source)]
    if files:
        # a folder: the files `slice-st mine` reads in it
        paths = expand_paths(files, follow_links=follow_links)
        check_distinct_files(paths)
        texts = [text for path in paths for text in read_texts(path, split=split, report=report)]
        excluded = evaluation_sentences(exclude_paths)
        words = {"min_words": min_words, "max_words": max_words}
        parts.append(cut_passages(texts, **words, exclude_sentences=excluded, seed=seed))
    if not parts:
        raise DataFormatError(
            "no distillation text: give --distill-data a saved dataset folder or text/JSONL files."
        )
    columns = ["text", "label"] if all("label" in part.column_names for part in parts) else ["text"]
    dataset = datasets.concatenate_datasets(
        [part.select_columns(columns) for part in parts]
    ).shuffle(seed=seed)
    return dataset if limit is None else dataset.select(range(min(limit, len(dataset))))


def is_saved_dataset(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder written by ``datasets``' ``save_to_disk`` (rather than a folder of text files)."""
    return any(
        os.path.isfile(os.path.join(path, name)) for name in ("state.json", "dataset_dict.json")
    )
