"""Corpus loaders for :class:`slice_st.SpanIndex` (text files, id ``<path>:<line>``; JSONL files; ``datasets``): unique
ids; a bad record is a :class:`CorpusError` (a ``ValueError``) naming the file and line."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from slice_st.errors import CorpusError
from slice_st.files import JSONL_SUFFIXES as JSONL_SUFFIXES
from slice_st.files import is_jsonl, jsonl_records, short_names
from slice_st.text import read_texts


@dataclass(frozen=True)
class Document:
    """One document: ``id``, ``text``, and its origin (file, 1-based line, character offset in the file)."""

    id: str
    text: str
    source: str = ""
    line: int = 0
    file_offset: int = 0


def read_jsonl(path: str, id_field: str = "id", text_field: str = "text") -> list[Document]:
    """Documents of a JSONL file: each line an object with ``id_field`` (a non-empty string) and ``text_field``.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "c.jsonl"
    >>> _ = path.write_text('{"id": "a", "text": "first"}\\n{"id": "7", "text": "second"}\\n')
    >>> [(d.id, d.text, d.line) for d in read_jsonl(str(path))]
    [('a', 'first', 1), ('7', 'second', 2)]
    """
    documents = []
    for number, offset, record in jsonl_records(path):
        fields = _id_and_text(record, id_field, text_field, f"{path}, line {number}", True)
        documents.append(Document(*fields, path, number, offset))
    return documents


def _id_and_text(
    record: Any, id_field: str, text_field: str | None, where: str, string_ids: bool = False
) -> tuple[str, str]:
    """``(id, text)`` of one record; ``string_ids``: the id must be a string (JSONL: ``"5"``, not ``5``)."""
    for kind, key in (("id", id_field), ("text", text_field)):
        if key not in record or record[key] is None:
            raise CorpusError(
                f"{where}: missing {kind} field {key!r} (fields: {sorted(record)[:10]})."
            )
    if record[id_field] == "":
        raise CorpusError(
            f'{where}: empty id (field {id_field!r} is ""): every document needs a non-empty id.'
        )
    doc_id, text = record[id_field], record[text_field]
    if string_ids and not isinstance(doc_id, str):
        raise CorpusError(
            f"{where}: id field {id_field!r} must be a string, got {type(doc_id).__name__} {doc_id!r:.40} "
            f'(write it as "{doc_id!s:.40}" if that is the id you mean).'
        )
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
        raise CorpusError(
            f"{where}: id field {id_field!r} must be a string or an integer, got {doc_id!r:.40}."
        )
    if not isinstance(text, str):
        raise CorpusError(
            f"{where}: text field {text_field!r} must be a string, got {type(text).__name__}."
        )
    return str(doc_id), text


def documents_from_dataset(
    dataset: Any, text_field: str = "text", id_field: str | None = "id"
) -> list[Document]:
    """Documents of a ``datasets.Dataset`` (or a sequence of mappings). ``id_field=None``: ids are row numbers.

    >>> import datasets
    >>> rows = datasets.Dataset.from_dict({"id": ["x", "y"], "text": ["one", "two"]})
    >>> [(d.id, d.text) for d in documents_from_dataset(rows)]
    [('x', 'one'), ('y', 'two')]
    """
    columns = getattr(dataset, "column_names", None)
    name = getattr(getattr(dataset, "info", None), "dataset_name", None) or type(dataset).__name__
    if columns is not None:
        for wanted in (text_field, id_field):
            if wanted is not None and wanted not in columns:
                raise CorpusError(f"{name}: no column {wanted!r} (columns: {columns}).")
    documents = []
    for number, row in enumerate(dataset):
        row = row if id_field is not None else dict(row) | {"__row__": number}
        fields = _id_and_text(row, id_field or "__row__", text_field, f"{name}, row {number}")
        documents.append(Document(*fields, name, number, 0))
    return documents


def read_corpus(
    paths: str | Sequence[str],
    *,
    split: str = "line",
    fmt: str | None = None,
    id_field: str = "id",
    text_field: str = "text",
    report: Callable[[str, str], None] | None = None,
) -> list[Document]:
    """Documents of several files; ``fmt`` ``"text"``/``"jsonl"`` or ``None`` (by suffix); ids checked unique.
    ``report(path, mode)`` hears which mode ``split="auto"`` chose for a text file."""
    if isinstance(paths, str):
        paths = [paths]
    if fmt not in (None, "text", "jsonl"):
        raise ValueError(f"fmt must be 'text', 'jsonl' or None, got {fmt!r}.")
    check_distinct_files(paths)
    documents: list[Document] = []
    for path in paths:
        if (fmt or ("jsonl" if is_jsonl(path) else "text")) == "jsonl":
            documents += read_jsonl(path, id_field, text_field)
            continue
        # a text file: id path:line, blank lines skipped
        name = os.path.normpath(path) if path != "-" else path
        for record in read_texts([path], split, fmt="text", report=report):
            origin = (record.source, record.line, record.file_offset)
            documents.append(Document(f"{name}:{record.line}", record.text, *origin))
    check_unique_ids(documents)
    return documents


def file_of_id(doc_id: str) -> str | None:
    """The file a text file's document id ``<path>:<line>`` names; ``None`` for another id (a JSONL one, a number).

    >>> file_of_id("corpus/a.txt:12"), file_of_id("T1")
    ('corpus/a.txt', None)
    """
    path, colon, line = doc_id.rpartition(":")
    return path if colon and path and line.isdigit() else None


def short_ids(doc_ids: Iterable[str], files: Iterable[str] = ()) -> dict[str, str]:
    """Each id as a user is shown it: a ``<path>:<line>`` id with its file's :func:`~slice_st.files.short_names`
    among the files of ``doc_ids`` and ``files`` (``a/x.txt:1`` and ``b/x.txt:1``; ``y.txt:3``); other ids whole.

    >>> short_ids(["corpus/a/x.txt:1", "corpus/b/x.txt:4", "corpus/y.txt:3", "T1"])
    {'corpus/a/x.txt:1': 'a/x.txt:1', 'corpus/b/x.txt:4': 'b/x.txt:4', 'corpus/y.txt:3': 'y.txt:3', 'T1': 'T1'}
    """
    doc_ids = list(dict.fromkeys(doc_ids))
    paths = {doc_id: file_of_id(doc_id) for doc_id in doc_ids}
    names = short_names([*files, *(path for path in paths.values() if path is not None)])
    return {
        doc_id: doc_id if path is None else f"{names[path]}:{doc_id.rpartition(':')[2]}"
        for doc_id, path in paths.items()
    }


def check_distinct_files(paths: Sequence[str]) -> None:
    """Refuse one file named twice (``a.txt`` and ``./a.txt``, a link to it…): its documents would be indexed twice."""
    seen: dict[tuple[int, int], str] = {}
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            continue  # the reader reports it
        key = (info.st_dev, info.st_ino)
        if key in seen and path != "-":
            raise CorpusError(f"{seen[key]} and {path} are the same file: give it once.")
        seen[key] = path


def check_unique_ids(documents: Iterable[Document]) -> None:
    seen: dict[str, Document] = {}
    for document in documents:
        if (first := seen.setdefault(document.id, document)) is not document:
            raise CorpusError(
                f"duplicate document id {document.id!r}: {document.source}, line {document.line} "
                f"(first seen in {first.source}, line {first.line})."
            )
