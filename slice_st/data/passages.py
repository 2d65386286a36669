"""Unlabeled passages for span self-distillation: read texts, cut them into passages, keep dev text out.

:class:`~slice_st.SpanDistillationLoss` needs nothing but text. :func:`read_texts` reads plain text
(one text per line), TSV (a chosen column), JSONL/JSON (a field) and ``datasets`` (a saved folder or a
``Dataset``); :func:`cut_passages` splits texts into sentences and packs consecutive sentences into
passages of a chosen word range, so passages hold multi-sentence context; texts that are single
sentences (STS-B, SNLI) are glued, in seeded random order, into passages of the same range.
Sentences of the dev/evaluation data (``exclude_sentences``) are removed before packing, so no
passage contains one. :func:`offline_passages` builds the set from the shared data folder.
"""

from __future__ import annotations

import csv
import json
import os
import random
from collections.abc import Iterable, Sequence
from typing import Any

from slice_st.data.corpus import read_jsonl, read_text_file
from slice_st.data.stsb import read_stsb, read_stsb_context
from slice_st.errors import DataFormatError
from slice_st.text import detokenize as detokenize_text
from slice_st.text import one_line, require, split_sentences


def _norm(sentence: str) -> str:
    return " ".join(sentence.lower().split())


def read_texts(source: Any, *, field: str = "text", column: int = -1, detokenize: bool = False) -> list[str]:
    """Texts from a file, a saved ``datasets`` folder, a ``Dataset``, or an iterable of strings.

    Files: ``.jsonl``/``.json`` (``field`` of each object), ``.tsv`` (``column`` of each row, default
    the last), anything else plain text with one text per line. Blank texts are skipped.
    ``detokenize`` undoes pre-tokenised spacing (``"do n't ."`` → ``"don't."``). Missing files and
    malformed rows raise errors naming the file and line.

    >>> read_texts(["A first text.", "  ", "A second one."])
    ['A first text.', 'A second one.']
    """
    texts: list[str]
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if os.path.isdir(path):
            datasets = require("datasets", "train", "reading a saved dataset")
            texts = _dataset_column(datasets.load_from_disk(path), field, path)
        elif not os.path.exists(path):
            raise FileNotFoundError(f"No such file or folder: {path}")
        elif path.endswith(".json"):
            texts = _read_json_list_texts(path, field)
        elif path.endswith(".jsonl"):
            texts = [document.text for document in read_jsonl(path, id_field=None, text_field=field)]
        elif path.endswith(".tsv"):
            texts = _read_tsv_texts(path, column)
        else:
            texts = [document.text for document in read_text_file(path)]
    elif hasattr(source, "column_names"):
        texts = _dataset_column(source, field, "dataset")
    else:
        texts = list(source)
        for position, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {position} is {type(text).__name__}, not a string.")
    texts = [one_line(text) for text in texts if text and text.strip()]
    return [detokenize_text(text) for text in texts] if detokenize else texts


def _dataset_column(dataset, field: str, name: str) -> list[str]:
    if field not in dataset.column_names:
        raise DataFormatError(f"{name}: no column {field!r}; columns: {dataset.column_names}.")
    values = list(dataset[field])
    for position, value in enumerate(values):
        if value is not None and not isinstance(value, str):
            raise DataFormatError(f"{name}, row {position}: {field!r} is {type(value).__name__}, not a string.")
    return [value for value in values if value]


def _read_json_list_texts(path: str, field: str) -> list[str]:
    """``field`` of each object of a JSON list (JSONL goes through :func:`slice_st.data.corpus.read_jsonl`)."""
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


def _read_tsv_texts(path: str, column: int) -> list[str]:
    texts = []
    with open(path, encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
            if not row:
                continue
            try:
                texts.append(row[column])
            except IndexError:
                raise DataFormatError(f"{path}, line {number}: no column {column} (the row has {len(row)}).") from None
    return texts


def cut_passages(
    texts: Iterable[str],
    *,
    min_words: int = 20,
    max_words: int = 80,
    exclude_sentences: Iterable[str] = (),
    seed: int = 0,
    limit: int | None = None,
):
    """Pack sentences into passages of ``min_words..max_words`` words → ``Dataset`` with a ``text`` column.

    A text of at least ``min_words`` words is cut into passages of consecutive sentences, each passage
    aiming at a seeded random length in the range (a sentence longer than ``max_words`` is cut into
    word chunks). Shorter texts are shuffled (seeded) and glued together the same way. Sentences in
    ``exclude_sentences`` (compared case- and space-insensitively) are removed first. Duplicates are
    dropped; ``limit`` keeps a seeded sample.

    >>> ds = cut_passages(["One two three. Four five six.", "Seven eight. Nine ten.", "Eleven twelve."], min_words=4,
    ...     max_words=6)
    >>> sorted(len(text.split()) for text in ds["text"])   # two documents; "Eleven twelve." is too short alone
    [4, 6]
    """
    datasets = require("datasets", "train", "building passages")

    if min_words < 1 or max_words < min_words:
        raise DataFormatError(f"need 1 <= min_words <= max_words, got {min_words} and {max_words}.")
    rng = random.Random(seed)
    excluded = {_norm(sentence) for sentence in exclude_sentences}
    passages: list[str] = []
    short: list[str] = []
    removed = 0
    for text in texts:
        sentences = split_sentences(text)
        kept = [sentence for sentence in sentences if _norm(sentence) not in excluded]
        removed += len(sentences) - len(kept)
        if sum(len(sentence.split()) for sentence in kept) >= min_words:
            passages += _pack(kept, min_words, max_words, rng, short)
        else:
            short += kept
    rng.shuffle(short)
    leftovers: list[str] = []
    passages += _pack(short, min_words, max_words, rng, leftovers)
    if leftovers:  # the last glued piece: keep it if it is long enough on its own
        tail = " ".join(leftovers)
        if len(tail.split()) >= min_words:
            passages.append(tail)
    unique = list(dict.fromkeys(passages))
    if limit is not None:
        unique = rng.sample(unique, min(limit, len(unique)))
    dataset = datasets.Dataset.from_dict({"text": unique})
    dataset.info.description = (
        f"{len(unique)} passages of {min_words}-{max_words} words; {removed} excluded sentence(s) removed."
    )
    return dataset


def _pack(sentences: Sequence[str], min_words: int, max_words: int, rng: random.Random, spill: list[str]) -> list[str]:
    """Consecutive sentences → passages; a final piece shorter than ``min_words`` joins the previous passage or
    ``spill``."""
    pieces: list[str] = []
    for sentence in sentences:
        words = sentence.split()
        pieces += (
            [" ".join(words[lo : lo + max_words]) for lo in range(0, len(words), max_words)]
            if len(words) > max_words
            else [sentence]
        )
    passages: list[str] = []
    current: list[str] = []
    count, target = 0, rng.randint(min_words, max_words)
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
    """Every sentence of evaluation files, to keep out of training text.

    Reads STS-B-Context TSVs (origin phrases, paraphrases, and each passage split into sentences) and
    STS-B TSVs (both sentences); the format is told by the STS-B-Context header.
    """
    sentences: set[str] = set()
    for path in paths:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"No such file: {path}")
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


OFFLINE_SOURCES = ("stsb", "sick", "snli", "parabank")


def offline_passages(
    data_dir: str | os.PathLike,
    *,
    sources: Sequence[str] = OFFLINE_SOURCES,
    exclude_paths: Sequence[str | os.PathLike] = (),
    min_words: int = 20,
    max_words: int = 80,
    seed: int = 0,
    limit: int | None = None,
):
    """Distillation passages from the shared data folder (see ``shared/DATA.md``).

    Sources: ``stsb`` (STS-B *train* sentences), ``sick`` (SICK sentences), ``snli`` (SNLI dev and
    test sentences), ``parabank`` (Nugget's ParaBank documents, train split: real multi-sentence
    text). Sentences of ``exclude_paths`` (your dev set, and STS-B dev, which it is built from) are
    removed. Pre-tokenised sources are detokenised.
    """
    data_dir = os.fspath(data_dir)
    texts: list[str] = []
    for source in sources:
        if source == "stsb":
            rows = read_stsb(os.path.join(data_dir, "stsbenchmark", "sts-train.csv"))
            texts += list(dict.fromkeys(list(rows["sentence1"]) + list(rows["sentence2"])))
        elif source == "sick":
            with open(os.path.join(data_dir, "sick", "SICK.txt"), encoding="utf-8", newline="") as handle:
                rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
            texts += list(dict.fromkeys([row["sentence_A"] for row in rows] + [row["sentence_B"] for row in rows]))
        elif source == "snli":
            lines: list[str] = []
            for name in ("s1.dev", "s2.dev", "s1.test", "s2.test"):
                lines += read_texts(os.path.join(data_dir, "snli", name), detokenize=True)
            texts += list(dict.fromkeys(lines))
        elif source == "parabank":
            path = os.path.join(data_dir, "nugget_pi", "paraphrase_identification", "train", "docs.txt")
            if not os.path.exists(path):
                raise FileNotFoundError(f"No such file: {path}")
            texts += read_texts(_read_tsv_texts(path, -1), detokenize=True)  # "id<TAB>document" rows
        else:
            raise DataFormatError(f"unknown source {source!r}; choose from {', '.join(OFFLINE_SOURCES)}.")
    excluded = evaluation_sentences(exclude_paths)
    return cut_passages(
        texts, min_words=min_words, max_words=max_words, exclude_sentences=excluded, seed=seed, limit=limit
    )


def load_passages(
    sources: Sequence[str],
    *,
    shared_data: str | None = None,
    exclude_paths: Sequence[str] = (),
    min_words: int = 20,
    max_words: int = 80,
    seed: int = 0,
    limit: int | None = None,
):
    """Distillation text for ``slice-st train --distill-data``: ``offline[:DIR]``, saved ``datasets`` folders
    (used as they are if they have a ``text`` column), or text/TSV/JSONL files (cut into passages)."""
    datasets = require("datasets", "train", "distillation passages")

    parts = []
    files: list[str] = []
    for source in sources:
        if source == "offline" or source.startswith("offline:"):
            data_dir = source.split(":", 1)[1] if ":" in source else shared_data
            if not data_dir:
                raise DataFormatError(
                    "--distill-data offline needs the shared data folder (offline:DIR or --shared-data)."
                )
            parts.append(
                offline_passages(
                    data_dir, exclude_paths=exclude_paths, min_words=min_words, max_words=max_words, seed=seed
                )
            )
        elif os.path.isdir(source):
            dataset = datasets.load_from_disk(source)
            if "text" not in dataset.column_names:
                raise DataFormatError(
                    f"{source}: a distillation dataset needs a 'text' column; columns: {dataset.column_names}."
                )
            parts.append(dataset)
        else:
            files.append(source)
    if files:
        texts = [text for path in files for text in read_texts(path)]
        parts.append(
            cut_passages(
                texts,
                min_words=min_words,
                max_words=max_words,
                exclude_sentences=evaluation_sentences(exclude_paths),
                seed=seed,
            )
        )
    if not parts:
        raise DataFormatError(
            "no distillation text: give --distill-data offline[:DIR], a saved dataset folder, or text/JSONL files."
        )
    columns = ["text", "label"] if all("label" in part.column_names for part in parts) else ["text"]
    dataset = datasets.concatenate_datasets([part.select_columns(columns) for part in parts]).shuffle(seed=seed)
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return dataset
