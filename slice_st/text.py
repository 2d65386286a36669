"""Text splitting: files cut into texts (one per line or paragraph, or JSONL records; :func:`guess_split` tells which),
texts into sentences (pysbd). The files are read by :mod:`slice_st.files`."""

from __future__ import annotations

import functools
import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from slice_st._extras import needs_extra
from slice_st.errors import CorpusError, SpanInputError
from slice_st.files import file_lines, is_jsonl, jsonl_records

#: How a text file is cut into texts: one per line, per paragraph (blank-line separated), or ``auto`` (per file).
SPLITS = ("auto", "line", "paragraph")


@dataclass(frozen=True)
class TextRecord:
    """One text cut from an input file: where it starts (1-based line, character offset) and its content."""

    source: str
    line: int
    file_offset: int
    text: str


def split_lines(content: str) -> list[str]:
    """``content`` cut after each ``\\n``, line ends kept (no other separator, unlike ``str.splitlines``)."""
    return [line for line in re.split(r"(?<=\n)", content) if line]


def read_texts(
    paths: Sequence[str],
    split: str = "line",
    *,
    fmt: str | None = None,
    text_field: str = "text",
    report: Callable[[str, str], None] | None = None,
) -> list[TextRecord]:
    """Cut files into texts, one per non-blank line or per paragraph (blank-line separated).

    A JSONL file (:func:`is_jsonl`, or ``fmt="jsonl"``; ``fmt="text"``: never) gives each object's ``text_field``.
    With ``split="auto"``, :func:`guess_split` decides per file and the choice is told to ``report(path, mode)``.
    """
    if split not in SPLITS:
        raise SpanInputError(f"split must be 'auto', 'line' or 'paragraph', got {split!r}.")
    records: list[TextRecord] = []
    for path in paths:
        if fmt == "jsonl" or (fmt is None and is_jsonl(path)):
            for number, offset, record in jsonl_records(path):
                text = record.get(text_field)
                if not isinstance(text, str):
                    raise CorpusError(
                        f"{path}, line {number}: text field {text_field!r} is missing or not a string."
                    )
                if text.strip():
                    records.append(TextRecord(path, number, offset, text))
            continue
        # streamed; "auto" looks at the whole file first, so it keeps its lines
        lines = file_lines(path)
        mode = split
        if split == "auto":
            lines = list(lines)
            mode = guess_split(raw for _, _, raw in lines)
            if report is not None:
                report(path, mode)
        if mode == "line":
            records += [
                TextRecord(path, number, offset, raw.rstrip("\r\n"))
                for number, offset, raw in lines
                if raw.strip()
            ]
            continue
        # A paragraph is the file's own characters (inner \r\n kept), so offsets inside it are file offsets.
        for has_text, group in itertools.groupby(lines, key=lambda line: bool(line[2].strip())):
            if has_text:
                number, offset, first = next(group)
                text = first + "".join(raw for _, _, raw in group)
                records.append(TextRecord(path, number, offset, text.rstrip("\r\n")))
    return records


WRAPPED_MAX_WIDTH = 120  # the widest hard-wrapped line, indentation included
# the narrowest width text is wrapped to (shorter lines are phrases, names, headings)
WRAPPED_MIN_WIDTH = 40
WRAPPED_SHARE = 0.6  # the share of inner line breaks that must be wrapping breaks
# how much shorter than its neighbours a line wrapped by hand may end mid-sentence
WRAPPED_SLACK = 10
# the share of lines opening alike (a date) or with as many fields, for one record per line
RECORD_SHARE = 0.6
#: A line that ends a sentence or a clause: final punctuation, maybe followed by closing quotes/brackets.
_LINE_END = re.compile(r"[.!?…:;][\"'”’)\]]*\s*$")


def guess_split(lines: Iterable[str]) -> str:
    """``"paragraph"`` when a text's lines are hard-wrapped (man pages, pydoc output, wrapped e-mails), else ``"line"``.

    A break between same-indented lines *wraps* when the next line's first word would not have fitted beside its
    neighbours; lines are hard-wrapped when most breaks wrap and 90% of lines are at most :data:`WRAPPED_MAX_WIDTH`
    wide. Records (log lines opening alike, CSV-like lines) stay ``"line"``.
    """
    texts = [line.rstrip() for line in lines]
    nonblank = sorted(len(text) for text in texts if text.strip())
    if len(nonblank) < 2 or nonblank[int(0.9 * (len(nonblank) - 1))] > WRAPPED_MAX_WIDTH:
        return "line"
    # Records stay one per line: most lines open alike with a digit (a log's date, a numbered list), or have as many
    # fields (CSV); pydoc's class drawing ("|") is neither.
    fields = [text.lstrip(" \t|") for text in texts if text.strip()]
    word_or_number = re.compile(r"(\d)\d*|([^\W\d])[^\W\d]*")
    shapes = Counter(
        word_or_number.sub(lambda m: "0" if m.group(1) else "a", text[:24]) for text in fields
    )
    shape, count = shapes.most_common(1)[0]
    if "0" in shape and count >= RECORD_SHARE * len(fields):
        return "line"
    for separator in (",", "\t", "|", ";"):
        number, count = Counter(text.count(separator) for text in fields).most_common(1)[0]
        if number and count >= max(2, 0.8 * len(fields)):
            return "line"
    breaks = wrapping = 0
    for run in _runs(texts):
        for number, (line, following) in enumerate(zip(run, run[1:])):
            width = max(len(text) for text in run[max(0, number - 2) : number + 3])
            word = following.split()[0]
            long_word = (
                len(word) > WRAPPED_MIN_WIDTH // 2 and len(line) < width - WRAPPED_MIN_WIDTH // 2
            )
            if width < WRAPPED_MIN_WIDTH or long_word:
                continue  # short lines (names, code), or a short line before a huge word: no evidence either way
            slack = 0 if _LINE_END.search(line) else WRAPPED_SLACK
            breaks += 1
            wrapping += len(line) + 1 + len(word) > width - slack
    return "paragraph" if breaks >= 2 and wrapping >= WRAPPED_SHARE * breaks else "line"


def _runs(texts: list[str]) -> Iterator[list[str]]:
    """Runs of 2+ same-indented lines with text (a line of only ``|`` or spaces, as ``pydoc`` draws them, is blank)."""
    run, run_indent = [], 0
    for text in texts + [""]:
        has_text = re.search(r"\w", text) is not None
        indent = len(text) - len(text.lstrip(" \t|"))  # pydoc draws a class's members behind "|"
        if has_text and run and indent == run_indent:
            run.append(text)
            continue
        if len(run) > 1:
            yield run
        run, run_indent = [text] if has_text else [], indent


def one_line(value: str) -> str:
    """``value`` with every run of whitespace (newlines included) turned into one space, stripped."""
    return " ".join(value.split())


#: A place a sentence might end; a text without one is a single sentence and skips the segmenter.
_MAYBE_END = re.compile(r"[.!?…][\"'”’)\]]*\s|\n")
#: Closing quotes/brackets that pysbd sometimes leaves at the start of the next sentence (``quote." Next``).
_LEADING_CLOSERS = re.compile(r"^([\"'”’)\]]+)(\s+|$)")


@functools.lru_cache(maxsize=1)
def _segmenter():
    with needs_extra("train", "sentence splitting"):
        import pysbd
    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, stripped, by pysbd (English: "Mr.", "e.g.", decimals end none; a line break does)."""
    if not _MAYBE_END.search(text.strip()):
        return [text.strip()] if text.strip() else []
    sentences: list[str] = []
    for part in _segmenter().segment(text):
        part = part.strip()
        closers = _LEADING_CLOSERS.match(part)
        if closers and sentences:  # a closing quote split off its sentence: give it back
            sentences[-1] += closers.group(1)
            part = part[closers.end() :].strip()
        if part:
            sentences.append(part)
    return sentences
