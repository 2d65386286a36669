"""Evaluation data: the STS-B-Context TSV, the STS benchmark TSV, and a builder of STS-B-Context-style sets.

* :func:`read_stsb_context` reads the public STS-B-Context format (Orbach et al., 2024): a TSV with a
  leading unnamed index column, then ``line`` (origin phrase), ``paraphrase`` (the target, verbatim
  inside the passage), ``passage`` and ``goldsim`` (0-5); cp1252-encoded, mixed CRLF/LF line endings.
  It takes a local path or a URL and returns a ``datasets.Dataset``.
* :func:`read_stsb` reads an STS-benchmark file (``sts-dev.csv``: genre, file, year, id, score,
  sentence1, sentence2, sometimes extra trailing columns).
* :func:`make_context` builds an STS-B-Context-*style* set from STS-B pairs: sentence2 is placed
  verbatim inside context made of other STS-B sentences. No generator model is involved, so it is a
  **proxy** for the real set (whose passages were written by a language model around sentence2).

Bad rows raise :class:`DataFormatError` (a ``ValueError``) naming the file and the line; nothing is
dropped silently.
"""

from __future__ import annotations

import csv
import io
import math
import os
import random
import re
import warnings
from collections.abc import Sequence
from typing import Any

from slice_st.errors import DataFormatError
from slice_st.text import one_line, require

STSB_CONTEXT_COLUMNS = ("line", "paraphrase", "passage", "goldsim")
CONTEXT_STYLES = ("preceding", "following", "surrounding", "clause")
MIN_SCORE, MAX_SCORE = 0.0, 5.0


# ------------------------------------------------------------------------------------------ reading
def _read_bytes(path_or_url: str | os.PathLike) -> tuple[bytes, str]:
    """The raw bytes of a local file or a URL (downloaded and cached by ``datasets``), and a display name."""
    name = os.fspath(path_or_url)
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", name):
        require("datasets", "eval", "reading a URL")
        from datasets.utils.file_utils import cached_path

        try:
            local = cached_path(name)
        except Exception as error:  # network errors come in many types
            raise FileNotFoundError(f"could not download {name}: {error}") from None
        with open(local, "rb") as handle:
            return handle.read(), name
    if not os.path.exists(name):
        raise FileNotFoundError(f"data file not found: {name}")
    if os.path.isdir(name):
        raise IsADirectoryError(f"expected a data file, got a directory: {name}")
    try:
        with open(name, "rb") as handle:
            return handle.read(), name
    except OSError as error:
        raise DataFormatError(f"{name}: cannot be read ({error.strerror}).") from None


def _decode(raw: bytes, name: str, encoding: str) -> str:
    """Decode ``raw``; ``encoding="auto"`` tries UTF-8 first, then cp1252 (the public file's encoding)."""
    candidates = ["utf-8-sig", "cp1252"] if encoding == "auto" else [encoding]
    error: UnicodeDecodeError | None = None
    for candidate in candidates:
        try:
            return raw.decode(candidate)
        except UnicodeDecodeError as exc:
            error = exc
    assert error is not None
    line = raw[: error.start].count(b"\n") + 1
    raise DataFormatError(
        f"{name}, line {line}: byte {raw[error.start]:#04x} at offset {error.start} cannot be decoded as "
        f"{' or '.join(candidates)}; pass the file's encoding."
    )


def _loose(text: str) -> str:
    """Text for the containment check: lower case, punctuation as spaces, single spaces (the real set writes the
    paraphrase mid-sentence: "A man is slicing a bun." appears as "…, a man is slicing a bun with…")."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _float_score(value: str, name: str, line: int, column: str) -> float:
    try:
        score = float(value)
    except ValueError:
        raise DataFormatError(f"{name}, line {line}: {column} {value!r} is not a number.") from None
    if math.isnan(score) or not MIN_SCORE <= score <= MAX_SCORE:
        raise DataFormatError(f"{name}, line {line}: {column} {value!r} is outside {MIN_SCORE:g}..{MAX_SCORE:g}.")
    return score


def read_stsb_context(
    path_or_url: str | os.PathLike,
    *,
    encoding: str = "auto",
    missing_paraphrase: str = "warn",
):
    """Read an STS-B-Context TSV into a ``datasets.Dataset``.

    Columns: ``index`` (the file's index column), ``line``, ``paraphrase``, ``passage``, ``goldsim``
    (float, 0-5), ``paraphrase_in_passage`` (bool) and ``file_line`` (1-based line of the row).
    ``encoding="auto"`` reads UTF-8 or cp1252. A row whose passage does not contain its paraphrase
    (verbatim, or up to case, punctuation and spacing, as the real set writes it mid-sentence) is reported:
    ``missing_paraphrase="warn"`` keeps it and warns (naming the rows),
    ``"error"`` raises, ``"drop"`` drops it and warns. Any other bad row raises
    :class:`DataFormatError` naming the file and line.

    Args:
        path_or_url: A local TSV or an http(s) URL.
        encoding: ``"auto"`` (UTF-8 or cp1252) or a codec name.
        missing_paraphrase: A row whose passage lacks its paraphrase: ``"warn"``, ``"error"`` or ``"drop"``.

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
    datasets = require("datasets", "eval", "reading STS-B-Context")

    if missing_paraphrase not in ("warn", "error", "drop"):
        raise DataFormatError(f"missing_paraphrase must be 'warn', 'error' or 'drop', got {missing_paraphrase!r}.")
    raw, name = _read_bytes(path_or_url)
    text = _decode(raw, name, encoding)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
    columns: dict[str, list[Any]] = {
        key: [] for key in ("index", *STSB_CONTEXT_COLUMNS, "paraphrase_in_passage", "file_line")
    }
    header: list[str] | None = None
    has_index = True
    missing: list[int] = []
    while True:
        line = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            raise DataFormatError(f"{name}, line {line}: malformed TSV ({error}).") from None
        if not row or (len(row) == 1 and not row[0].strip()):
            if header is None:
                continue
            raise DataFormatError(f"{name}, line {line}: empty line inside the data.")
        if header is None:
            header = [cell.strip().lstrip("\ufeff") for cell in row]
            expected = list(STSB_CONTEXT_COLUMNS)
            if header[1:] == expected and header[0] in ("", "Unnamed: 0", "index", "idx"):
                has_index = True
            elif header == expected:
                has_index = False
            else:
                raise DataFormatError(
                    f"{name}, line {line}: wrong columns {header}; expected an unnamed index column then "
                    f"{', '.join(expected)} (tab-separated)."
                )
            continue
        width = len(STSB_CONTEXT_COLUMNS) + has_index
        if len(row) != width:
            raise DataFormatError(f"{name}, line {line}: expected {width} tab-separated fields, got {len(row)}.")
        if has_index:
            try:
                index = int(row[0])
            except ValueError:
                raise DataFormatError(f"{name}, line {line}: index {row[0]!r} is not an integer.") from None
            row = row[1:]
        else:
            index = len(columns["line"])
        origin, paraphrase, passage, goldsim = row
        for column, value in (("line", origin), ("paraphrase", paraphrase), ("passage", passage)):
            if not value.strip():
                raise DataFormatError(f"{name}, line {line}: empty {column}.")
        score = _float_score(goldsim.strip(), name, line, "goldsim")
        inside = paraphrase.strip() in passage or _loose(paraphrase) in _loose(passage)
        if not inside:
            missing.append(line)
            if missing_paraphrase == "error":
                raise DataFormatError(
                    f"{name}, line {line}: the passage does not contain the paraphrase {paraphrase.strip()!r:.80}."
                )
            if missing_paraphrase == "drop":
                continue
        for key, value in zip(
            columns, (index, origin.strip(), paraphrase.strip(), passage.strip(), score, inside, line)
        ):
            columns[key].append(value)
    if header is None:
        raise DataFormatError(f"{name}: the file is empty (no header row).")
    if not columns["line"] and not missing:
        raise DataFormatError(f"{name}: no data rows after the header.")
    if missing:
        action = "dropped" if missing_paraphrase == "drop" else "kept"
        shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
        warnings.warn(
            f"{name}: {len(missing)} row(s) whose passage does not contain the paraphrase, even up to case and "
            f"punctuation ({action}); "
            f"lines {shown}.",
            stacklevel=2,
        )
    features = datasets.Features(
        {
            "index": datasets.Value("int64"),
            "line": datasets.Value("string"),
            "paraphrase": datasets.Value("string"),
            "passage": datasets.Value("string"),
            "goldsim": datasets.Value("float64"),
            "paraphrase_in_passage": datasets.Value("bool"),
            "file_line": datasets.Value("int64"),
        }
    )
    return datasets.Dataset.from_dict(columns, features=features)


def write_stsb_context(rows, path: str | os.PathLike, *, encoding: str = "utf-8") -> int:
    """Write rows (a ``Dataset`` or dicts with ``line``, ``paraphrase``, ``passage``, ``goldsim``) in the
    STS-B-Context TSV format (unnamed index column first); returns the number of rows written.

    Args:
        rows: A ``Dataset`` or dicts with ``line``, ``paraphrase``, ``passage``, ``goldsim``.
        path: The TSV to write.
        encoding: Text encoding of the file.

    Returns:
        The number of rows written.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "out.tsv"
        >>> write_stsb_context([{"line": "a", "paraphrase": "b", "passage": "x b y", "goldsim": 1.0}], path)
        1
        >>> path.read_text().splitlines()[0].split("\\t")
        ['', 'line', 'paraphrase', 'passage', 'goldsim']
    """
    count = 0
    with open(path, "w", encoding=encoding, newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["", *STSB_CONTEXT_COLUMNS])
        for index, row in enumerate(rows):
            cells = [one_line(str(row[key])) for key in STSB_CONTEXT_COLUMNS[:3]]
            writer.writerow([index, *cells, f"{float(row['goldsim']):g}"])
            count += 1
    return count


#: A note beside an STS-B-Context TSV saying where its passages come from (``slice-st make-context`` writes one).
SOURCE_SUFFIX = ".source.json"
#: ``source`` values of the note: the released set (passages written by a language model), a ``make-context``
#: proxy (STS-B sentences glued around the pair's sentence), or unknown.
CONTEXT_SOURCES = ("released", "make-context", "unknown")


def write_source_note(path: str | os.PathLike, source: str, **details: Any) -> str:
    """Record beside ``path`` (``PATH.source.json``) where its passages come from; returns the note's path.

    Args:
        path: The data file the note describes.
        source: Where its passages come from (e.g. ``"make-context"``).
        **details: Anything else to record (JSON values).

    Returns:
        The note's path.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "dev.tsv"
        >>> _ = write_source_note(path, "make-context", seed=0)
        >>> read_source_note(path)
        'make-context'
    """
    import json

    if source not in CONTEXT_SOURCES:
        raise DataFormatError(f"source must be one of {CONTEXT_SOURCES}, got {source!r}.")
    note = os.fspath(path) + SOURCE_SUFFIX
    with open(note, "w", encoding="utf-8") as handle:
        json.dump({"format": "STS-B-Context", "source": source, **details}, handle, indent=1)
    return note


def read_source_note(path: str | os.PathLike | None) -> str | None:
    """The ``source`` recorded by :func:`write_source_note` beside ``path`` (``None`` without a readable note).

    Args:
        path: The data file (``None``: no note).

    Returns:
        The recorded source, or ``None``.
    """
    import json

    if not path or not os.path.isfile(os.fspath(path) + SOURCE_SUFFIX):
        return None
    try:
        with open(os.fspath(path) + SOURCE_SUFFIX, encoding="utf-8") as handle:
            source = json.load(handle).get("source")
    except (OSError, ValueError, AttributeError):
        return None
    return source if source in CONTEXT_SOURCES else None


def read_stsb(path: str | os.PathLike):
    """Read an STS-benchmark TSV (no header: genre, file, year, id, score, sentence1, sentence2, extras…).

    Returns a ``datasets.Dataset`` with ``genre``, ``source``, ``year``, ``id``, ``score`` (0-5),
    ``sentence1``, ``sentence2`` and ``file_line``. Fields are read with ``csv.QUOTE_NONE`` (the file
    contains bare quotes); extra trailing columns are ignored.

    Args:
        path: An STS-benchmark TSV (e.g. ``sts-dev.csv``).

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "sts.csv"
        >>> row = "main-captions\\tMSRvid\\t2012test\\t0001\\t5.000\\tA man plays.\\tA man is playing.\\n"
        >>> _ = path.write_text(row)
        >>> read_stsb(path)[0]["sentence2"]
        'A man is playing.'
    """
    datasets = require("datasets", "eval", "reading STS-B")

    raw, name = _read_bytes(path)
    text = _decode(raw, name, "utf-8-sig")
    columns: dict[str, list[Any]] = {
        key: [] for key in ("genre", "source", "year", "id", "score", "sentence1", "sentence2", "file_line")
    }
    for number, raw_line in enumerate(text.splitlines(), start=1):
        if not raw_line.strip():
            raise DataFormatError(f"{name}, line {number}: empty line.")
        fields = next(csv.reader([raw_line], delimiter="\t", quoting=csv.QUOTE_NONE))
        if len(fields) < 7:
            raise DataFormatError(
                f"{name}, line {number}: expected at least 7 tab-separated fields (genre, file, year, id, score, "
                f"sentence1, sentence2), got {len(fields)}."
            )
        genre, source, year, pair_id, score, sentence1, sentence2 = fields[:7]
        score_value = _float_score(score.strip(), name, number, "score")
        for column, value in (("sentence1", sentence1), ("sentence2", sentence2)):
            if not value.strip():
                raise DataFormatError(f"{name}, line {number}: empty {column}.")
        for key, value in zip(
            columns, (genre, source, year, pair_id, score_value, sentence1.strip(), sentence2.strip(), number)
        ):
            columns[key].append(value)
    if not columns["score"]:
        raise DataFormatError(f"{name}: no rows.")
    return datasets.Dataset.from_dict(columns)


# ------------------------------------------------------------------------------------- context sets
_LEADS = (
    "According to the report:",
    "One caption simply read:",
    "Then came the update:",
    "As someone put it:",
    "The note said:",
    "Meanwhile, another line stood out:",
)
_TRAILS = (
    "— or so it was reported.",
    "— at least, that is how it was described.",
    "— nobody disputed that.",
    "— according to the caption.",
)
_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _too_close(candidate: set[str], targets: Sequence[set[str]], limit: float = 0.5) -> bool:
    for target in targets:
        union = candidate | target
        if union and len(candidate & target) / len(union) >= limit:
            return True
    return False


def make_context(
    pairs,
    *,
    seed: int = 0,
    styles: Sequence[str] = CONTEXT_STYLES,
    words: int = 40,
    limit: int | None = None,
):
    """Build an STS-B-Context-style set: each pair's ``sentence2`` placed verbatim inside context.

    ``pairs`` is a ``Dataset`` or list of dicts with ``sentence1``, ``sentence2`` and ``score`` (as
    from :func:`read_stsb`). Context sentences are other sentences of the same pairs, never one of the
    pair's own and never one sharing half of its words with them (Jaccard ≥ 0.5), added until the
    passage has at least ``words`` words. Styles, chosen per pair: ``preceding`` (context then the
    target), ``following``, ``surrounding``, ``clause`` (the target wrapped by a lead-in or a trailing
    clause, still verbatim). ``limit`` keeps a seeded sample of that many pairs, in file order. Same
    inputs and seed, same output.

    Returns a ``Dataset`` with ``line`` (sentence1), ``paraphrase`` (sentence2), ``passage``,
    ``goldsim``, ``style`` and ``source_index`` (the pair's position in ``pairs``).

    Args:
        pairs: A ``Dataset`` or dicts with ``sentence1``, ``sentence2``, ``score`` (as from :func:`read_stsb`).
        seed: Seed of the context, the styles and the sample.
        styles: Styles to choose from, per pair.
        words: Least number of words per passage.
        limit: Keep a seeded sample of that many pairs.

    Example:
        >>> pairs = [{"sentence1": "A man plays guitar.", "sentence2": "Someone is playing a guitar.", "score": 4.2},
        ...          {"sentence1": "The cat sleeps.", "sentence2": "A kitten is napping on a sofa.", "score": 3.5},
        ...          {"sentence1": "Stocks fell sharply.", "sentence2": "Markets dropped on Monday.", "score": 3.9}]
        >>> ctx = make_context(pairs, seed=1, words=12)
        >>> all(row["paraphrase"] in row["passage"] for row in ctx), len(ctx)
        (True, 3)
    """
    datasets = require("datasets", "eval", "make_context")

    unknown = [style for style in styles if style not in CONTEXT_STYLES]
    if unknown or not styles:
        raise DataFormatError(f"styles must be a non-empty subset of {CONTEXT_STYLES}, got {list(styles)}.")
    if words < 1:
        raise DataFormatError(f"words must be >= 1, got {words}.")
    rows = [dict(row) for row in pairs]
    for position, row in enumerate(rows):
        for key in ("sentence1", "sentence2", "score"):
            if key not in row:
                raise DataFormatError(f"pair {position} has no {key!r} field.")
        for key in ("sentence1", "sentence2"):
            if not isinstance(row[key], str) or not row[key].strip():
                raise DataFormatError(f"pair {position}: {key} is empty or not a string.")
    pool: list[str] = []
    seen: set[str] = set()
    for row in rows:
        for key in ("sentence1", "sentence2"):
            sentence = one_line(row[key])
            if sentence not in seen:
                seen.add(sentence)
                pool.append(sentence)
    if len(pool) < 3:
        raise DataFormatError(f"need at least 3 distinct sentences to build context, got {len(pool)}.")
    pool_words = [_words(sentence) for sentence in pool]
    rng = random.Random(seed)
    chosen = range(len(rows))
    if limit is not None:
        if limit < 1:
            raise DataFormatError(f"limit must be >= 1, got {limit}.")
        chosen = sorted(rng.sample(range(len(rows)), min(limit, len(rows))))
    out: dict[str, list[Any]] = {
        key: [] for key in ("line", "paraphrase", "passage", "goldsim", "style", "source_index")
    }
    for position in chosen:
        row = rows[position]
        origin, target = one_line(row["sentence1"]), one_line(row["sentence2"])
        own = [_words(origin), _words(target)]
        style = rng.choice(list(styles))
        core = target
        if style == "clause":
            core = f"{rng.choice(_LEADS)} {target}" if rng.random() < 0.5 else f"{target} {rng.choice(_TRAILS)}"
        context: list[str] = []
        count = len(core.split())
        attempts = 0
        while (count < words or not context) and attempts < 200:
            attempts += 1
            pick = rng.randrange(len(pool))
            sentence = pool[pick]
            if sentence in (origin, target) or sentence in context or _too_close(pool_words[pick], own):
                continue
            context.append(sentence)
            count += len(sentence.split())
        if not context:
            raise DataFormatError(f"pair {position}: found no context sentence unlike the pair's own sentences.")
        if style == "preceding":
            parts = [*context, core]
        elif style == "following":
            parts = [core, *context]
        else:
            cut = rng.randint(1, len(context)) if len(context) > 1 else rng.randint(0, 1)
            parts = [*context[:cut], core, *context[cut:]]
        passage = " ".join(parts)
        assert target in passage
        score = float(row["score"])
        out["line"].append(origin)
        out["paraphrase"].append(target)
        out["passage"].append(passage)
        out["goldsim"].append(score)
        out["style"].append(style)
        out["source_index"].append(position)
    return datasets.Dataset.from_dict(out)
