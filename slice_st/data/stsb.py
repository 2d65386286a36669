"""Evaluation data: the STS-B-Context TSV (Orbach et al., 2024) and the STS benchmark TSV, read into ``datasets``;
a bad row is a :class:`DataFormatError` (a ``ValueError``) naming the file and the line, never dropped silently."""

from __future__ import annotations

import csv
import io
import math
import os
import re
import warnings
from typing import TYPE_CHECKING, Any

from slice_st._extras import needs_extra
from slice_st.errors import DataFormatError

if TYPE_CHECKING:
    from datasets import Dataset

STSB_CONTEXT_COLUMNS = ("line", "paraphrase", "passage", "goldsim")
MIN_SCORE, MAX_SCORE = 0.0, 5.0
#: The columns of :func:`read_stsb_context`'s dataset and their types.
_CONTEXT_FEATURES = {
    "index": "int64",
    "line": "string",
    "paraphrase": "string",
    "passage": "string",
}
_CONTEXT_FEATURES |= {"goldsim": "float64", "paraphrase_in_passage": "bool", "file_line": "int64"}


def _read_text(path_or_url: str | os.PathLike, encodings: tuple[str, ...]) -> tuple[str, str]:
    """``(text, name)`` of a file or URL (cached by ``datasets``), decoded by the first of ``encodings`` that can."""
    path = name = os.fspath(path_or_url)
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", name):
        with needs_extra("eval", "reading a URL"):
            from datasets.utils.file_utils import cached_path

        try:
            path = cached_path(name)
        except Exception as error:  # network errors come in many types
            raise FileNotFoundError(f"could not download {name}: {error}") from None
    elif not os.path.exists(name):
        raise FileNotFoundError(f"data file not found: {name}")
    elif os.path.isdir(name):
        raise IsADirectoryError(f"expected a data file, got a directory: {name}")
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise DataFormatError(f"{name}: cannot be read ({error.strerror}).") from None
    for encoding in encodings:
        try:
            return raw.decode(encoding), name
        except UnicodeDecodeError as exc:
            error = exc
    line = raw[: error.start].count(b"\n") + 1
    raise DataFormatError(
        f"{name}, line {line}: byte {raw[error.start]:#04x} at offset {error.start} cannot be decoded as "
        f"{' or '.join(encodings)}; pass the file's encoding."
    )


def _loose(text: str) -> str:
    """Lower case, punctuation as spaces, single spaces ("A man is slicing a bun." is in "…, a man is slicing a…")."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _float_score(value: str, name: str, line: int, column: str) -> float:
    try:
        score = float(value)
    except ValueError:
        raise DataFormatError(f"{name}, line {line}: {column} {value!r} is not a number.") from None
    if math.isnan(score) or not MIN_SCORE <= score <= MAX_SCORE:
        raise DataFormatError(
            f"{name}, line {line}: {column} {value!r} is outside {MIN_SCORE:g}..{MAX_SCORE:g}."
        )
    return score


def read_stsb_context(
    path_or_url: str | os.PathLike, *, encoding: str = "auto", missing_paraphrase: str = "warn"
) -> Dataset:
    """Read an STS-B-Context TSV into a ``datasets.Dataset``.

    The public format: a leading unnamed index column (optional), then ``line`` (origin phrase), ``paraphrase``
    (inside the passage), ``passage`` and ``goldsim`` (0-5); cp1252 or UTF-8, mixed line endings. The dataset has
    those columns plus ``index``, ``paraphrase_in_passage`` and ``file_line`` (1-based).

    Args:
        path_or_url: A local TSV or an http(s) URL.
        encoding: ``"auto"`` (UTF-8 or cp1252) or a codec name.
        missing_paraphrase: For a passage without its paraphrase (even up to case, punctuation and spacing):
            ``"warn"`` keeps it and warns, ``"error"`` raises, ``"drop"`` drops it and warns.

    Returns:
        A ``datasets.Dataset``.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ctx.tsv"
        >>> _ = path.write_bytes(b"\\tline\\tparaphrase\\tpassage\\tgoldsim\\r\\n0\\tA dog runs.\\tA dog is running.\\t"
        ...                      b"It was late. A dog is running. Nobody saw it.\\t4.2\\n")
        >>> data = read_stsb_context(path)
        >>> data[0]["paraphrase"], data[0]["goldsim"], data[0]["paraphrase_in_passage"]
        ('A dog is running.', 4.2, True)
    """
    with needs_extra("eval", "reading STS-B-Context"):
        import datasets

    if missing_paraphrase not in ("warn", "error", "drop"):
        raise DataFormatError(
            f"missing_paraphrase must be 'warn', 'error' or 'drop', got {missing_paraphrase!r}."
        )
    encodings = ("utf-8-sig", "cp1252") if encoding == "auto" else (encoding,)
    text, name = _read_text(path_or_url, encodings)
    rows = _tsv_rows(text, name)
    header = next(rows, None)
    if header is None:
        raise DataFormatError(f"{name}: the file is empty (no header row).")
    has_index = _context_header(*header, name)
    columns: dict[str, list[Any]] = {key: [] for key in _CONTEXT_FEATURES}
    missing: list[int] = []
    for line, row in rows:
        values = _context_row(row, has_index, name, line, len(columns["line"]))
        if not values[-1]:
            missing.append(line)
            if missing_paraphrase == "error":
                raise DataFormatError(
                    f"{name}, line {line}: the passage does not contain the paraphrase {values[2]!r:.80}."
                )
            if missing_paraphrase == "drop":
                continue
        for key, value in zip(columns, (*values, line)):
            columns[key].append(value)
    if not columns["line"] and not missing:
        raise DataFormatError(f"{name}: no data rows after the header.")
    if missing:
        shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
        warnings.warn(
            f"{name}: {len(missing)} row(s) whose passage does not contain the paraphrase, even up to case and "
            f"punctuation ({'dropped' if missing_paraphrase == 'drop' else 'kept'}); lines {shown}.",
            stacklevel=2,
        )
    features = {key: datasets.Value(kind) for key, kind in _CONTEXT_FEATURES.items()}
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


def _tsv_rows(text: str, name: str, quoting: int = csv.QUOTE_MINIMAL):
    """``(line number, cells)`` of each TSV row; blank lines before the first row are skipped, later ones refused."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=quoting)
    started, line = False, 1
    try:
        for row in reader:
            if row and (len(row) > 1 or row[0].strip()):
                started = True
                yield line, row
            elif started:
                raise DataFormatError(f"{name}, line {line}: empty line inside the data.")
            line = reader.line_num + 1
    except csv.Error as error:
        raise DataFormatError(f"{name}, line {line}: malformed TSV ({error}).") from None


def _context_header(line: int, row: list[str], name: str) -> bool:
    """Whether the header starts with the index column (checked: the public columns, in order)."""
    header, expected = [cell.strip().lstrip("\ufeff") for cell in row], list(STSB_CONTEXT_COLUMNS)
    if header == expected or (
        header[1:] == expected and header[0] in ("", "Unnamed: 0", "index", "idx")
    ):
        return header != expected
    raise DataFormatError(
        f"{name}, line {line}: wrong columns {header}; expected an unnamed index column then "
        f"{', '.join(expected)} (tab-separated)."
    )


def _context_row(row: list[str], has_index: bool, name: str, line: int, position: int) -> tuple:
    """``(index, line, paraphrase, passage, goldsim, paraphrase_in_passage)`` of one data row, checked."""
    width = len(STSB_CONTEXT_COLUMNS) + has_index
    if len(row) != width:
        raise DataFormatError(
            f"{name}, line {line}: expected {width} tab-separated fields, got {len(row)}."
        )
    try:
        index = int(row[0]) if has_index else position
    except ValueError:
        raise DataFormatError(f"{name}, line {line}: index {row[0]!r} is not an integer.") from None
    origin, paraphrase, passage, goldsim = (cell.strip() for cell in row[has_index:])
    for column, value in (("line", origin), ("paraphrase", paraphrase), ("passage", passage)):
        if not value:
            raise DataFormatError(f"{name}, line {line}: empty {column}.")
    inside = paraphrase in passage or _loose(paraphrase) in _loose(passage)
    return index, origin, paraphrase, passage, _float_score(goldsim, name, line, "goldsim"), inside


def read_stsb(path: str | os.PathLike) -> Dataset:
    """Read an STS-benchmark TSV (no header: genre, file, year, id, score, sentence1, sentence2, extras…).

    Fields are read with ``csv.QUOTE_NONE`` (the file contains bare quotes); extra trailing columns are ignored.

    Args:
        path: An STS-benchmark TSV (e.g. ``sts-dev.csv``).

    Returns:
        A ``datasets.Dataset`` with ``genre``, ``source``, ``year``, ``id``, ``score`` (0-5), ``sentence1``,
        ``sentence2`` and ``file_line``.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "sts.csv"
        >>> row = "main-captions\\tMSRvid\\t2012test\\t0001\\t5.000\\tA man plays.\\tA man is playing.\\n"
        >>> _ = path.write_text(row)
        >>> read_stsb(path)[0]["sentence2"]
        'A man is playing.'
    """
    with needs_extra("eval", "reading STS-B"):
        import datasets

    text, name = _read_text(path, ("utf-8-sig",))
    keys = ("genre", "source", "year", "id", "score", "sentence1", "sentence2", "file_line")
    columns: dict[str, list[Any]] = {key: [] for key in keys}
    for number, fields in _tsv_rows(text, name, csv.QUOTE_NONE):
        if len(fields) < 7:
            raise DataFormatError(
                f"{name}, line {number}: expected at least 7 fields, got {len(fields)}."
            )
        score = _float_score(fields[4].strip(), name, number, "score")
        sentences = [sentence.strip() for sentence in fields[5:7]]
        for column, value in zip(("sentence1", "sentence2"), sentences):
            if not value:
                raise DataFormatError(f"{name}, line {number}: empty {column}.")
        for key, value in zip(columns, (*fields[:4], score, *sentences, number)):
            columns[key].append(value)
    if not columns["score"]:
        raise DataFormatError(f"{name}: no rows.")
    return datasets.Dataset.from_dict(columns)
