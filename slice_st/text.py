"""Text helpers shared by the library and the command line: reading UTF-8 files, cutting them into texts
and sentences, tidying whitespace; and :func:`require`, the import of an optional dependency.

The lowest layer with :mod:`slice_st.spans` and :mod:`slice_st.tokens`: it imports nothing of ``slice_st``.

A **line** ends at ``\\n`` (``\\r\\n`` too); other characters Python's ``str.splitlines`` splits on
(``\\f``, ``\\v``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028, U+2029, a lone ``\\r``) stay inside the line, so line numbers
are those of ``grep -n`` and editors. A UTF-8 byte-order mark at the start of a file is not text: it is
never part of a line, though it counts as the file's first character in file offsets.

**Optional dependencies.** The core install (``pip install slice-st``) covers span encoding,
``best_spans``, mining and the corpus index. Training, evaluation and the FAISS stage need extras
(``slice-st[train]``, ``[eval]``, ``[faiss]``, or ``[all]``); every import of one goes through
:func:`require`, which names the extra to install when the module is missing.
"""

from __future__ import annotations

import csv
import errno
import fnmatch
import functools
import glob
import importlib
import json
import logging
import os
import re
import secrets
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

from slice_st.errors import CorpusError, DataFormatError, FileAccessError, MissingExtraError, SpanInputError

#: How a text file is cut into texts: one per line, one per paragraph (blank-line separated), or ``auto``
#: (:func:`guess_split`, per file).
SPLITS = ("auto", "line", "paragraph")

BOM = "\ufeff"

#: Files read as JSONL (one JSON object per line) wherever a corpus is read: ``mine``, ``index build``, ``serve``.
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.txt")
#: Files a folder given as input stands for (searched recursively; hidden files and folders left out).
CORPUS_SUFFIXES = (".txt", ".text", ".md", ".rst", ".jsonl", ".ndjson")

logger = logging.getLogger(__name__)


def require(module: str, extra: str, feature: str | None = None) -> ModuleType:
    """Import ``module`` (from the ``extra`` extra of ``pyproject.toml``) or raise :class:`MissingExtraError`
    naming the extra; ``feature`` says what needs it.

    >>> require("json", "train").__name__
    'json'
    >>> require("no_such_module_xyz", "eval", "the Table-1 runner")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    slice_st.errors.MissingExtraError: the Table-1 runner needs no_such_module_xyz, which is not installed: ...
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        top = module.split(".")[0]
        if (
            error.name is not None and error.name.split(".")[0] != top
        ):  # the module is there but one of *its* imports failed
            raise
        what = feature or f"this part of slice-st ({extra})"
        raise MissingExtraError(
            f"{what} needs {top}, which is not installed: pip install 'slice-st[{extra}]'", name=top
        ) from None


@dataclass(frozen=True)
class TextRecord:
    """One text cut from an input file: where it starts (1-based line, character offset) and its content."""

    source: str
    line: int
    file_offset: int
    text: str


def check_creatable(path: str) -> None:
    """Raise :class:`FileAccessError` unless a missing ``path`` could be created: its nearest existing ancestor
    must be a writable folder."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise FileAccessError(f"cannot create {path}: {parent} is a file, not a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FileAccessError(f"cannot create {path}: {parent} is not writable (permission denied).")


def check_not_link(path: str | os.PathLike, what: str = "output", purpose: str = "to write into") -> str:
    """Raise :class:`FileAccessError` if ``path`` is a symbolic link (to a folder, a file or nothing); returns ``path``.

    An output folder the user names must be the folder itself: writing through a link would write
    wherever it points. A trailing separator does not hide the link (``link/`` is the link itself).

    Args:
        path: The output path to check.
        what: How the error names it (``"output"``).
        purpose: What the real folder is for, ending the error message (``"to ship the adapter into"``).

    Returns:
        ``path``, unchanged.

    Example:
        >>> check_not_link("runs/new-run")
        'runs/new-run'
    """
    normal = os.path.normpath(os.fspath(path))
    if os.path.islink(normal):
        raise FileAccessError(f"{what} {normal} is a symbolic link: name the real folder {purpose}.")
    return path


#: ``os.open`` flags of a file that must be new: never an existing file, never through a symbolic link planted there.
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def append_csv_row(folder: str, file_name: str, header: Sequence[str], row: Sequence) -> str:
    """Append ``row`` to the CSV file ``folder/file_name`` (creating the folder), writing ``header`` first in a new
    file.

    The evaluators' results log, as sentence-transformers' evaluators keep it (one row per call).

    Args:
        folder: The output folder (created if missing).
        file_name: The CSV file's name in it.
        header: The column names, written when the file is new.
        row: The values of one row.

    Returns:
        The path of the CSV file.
    """
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, file_name)
    exists = os.path.isfile(path)
    with open(path, "a" if exists else "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if not exists:
            writer.writerow(header)
        writer.writerow(row)
    return path


def create_new_file(path: str, mode: str = "wb", encoding: str | None = None):
    """Open a file that must not exist yet for writing (``O_CREAT|O_EXCL|O_NOFOLLOW``; permissions as ``open``'s, umask
    applied).

    A file, a folder or a symbolic link already at ``path`` is ``FileExistsError``: nothing is written through a
    planted link.

    Args:
        path: The new file.
        mode: ``"wb"`` or ``"w"``.
        encoding: For ``"w"``.

    Returns:
        The open file object.

    Example:
        >>> with create_new_file("fresh.bin") as handle:  # doctest: +SKIP
        ...     handle.write(b"data")
    """
    return os.fdopen(os.open(path, NEW_FILE_FLAGS, 0o666), mode, encoding=encoding)


#: ``os.open`` flags of a file read where it is: never through a symbolic link, and the open of a FIFO does not block.
READ_FILE_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
)


def open_regular_file(path: str | os.PathLike, size: int | None = None, *, folder: int | None = None):
    """Open ``path`` for reading in binary only if it is a regular file itself: never through a symbolic link.

    One ``os.open`` (``O_NOFOLLOW``, so a link swapped in after an earlier check is not followed, and
    ``O_NONBLOCK``, so a FIFO cannot block the open), then ``os.fstat`` of that descriptor: a link, a
    folder, a device, a pipe or a socket is a :class:`FileAccessError`, as is a file whose size is not
    ``size``. What is checked is what is read. Other failures (a missing file, permissions) are the
    ``OSError`` of the open.

    Args:
        path: The file to read.
        size: Its expected size in bytes (``None``: any).
        folder: A descriptor from :func:`open_folder`: ``path`` is then a name inside that very folder, so a
            link swapped in for the folder itself is not followed either.

    Returns:
        The open binary file object (blocking).

    Example:
        >>> with open_regular_file("manifest.json") as handle:  # doctest: +SKIP
        ...     data = handle.read()
    """
    path = os.fspath(path)
    try:
        descriptor = os.open(path, READ_FILE_FLAGS, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EMLINK) or _is_link(path, folder):  # EMLINK: FreeBSD's O_NOFOLLOW
            raise FileAccessError(f"{path} is a symbolic link, not followed: nothing is read through it") from None
        raise
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise FileAccessError(f"{path} is not a regular file: a folder, device, pipe or socket is never read")
        if size is not None and found.st_size != size:
            raise FileAccessError(f"{path} has {found.st_size} bytes, not the {size} expected")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _is_link(path: str, folder: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(path, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


#: ``os.open`` flags of a folder opened where it is (:func:`open_folder`).
FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@contextmanager
def open_folder(path: str | os.PathLike) -> Iterator[int | None]:
    """A descriptor of the folder ``path`` itself, never of a folder a symbolic link there points to.

    Files opened relative to it (``open_regular_file(name, folder=fd)``) are those of this very folder,
    even if the folder is swapped for a link after it was checked. Where the system cannot open files
    relative to a folder (Windows), yields ``None`` and callers use paths.

    Args:
        path: The folder.

    Yields:
        An ``os.open`` descriptor (closed on exit), or ``None``.

    Raises:
        FileAccessError: ``path`` is a symbolic link or not a folder.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as where, open_folder(where) as folder:
        ...     isinstance(folder, int) or folder is None
        True
    """
    path = os.fspath(path)
    if os.open not in os.supports_dir_fd or not hasattr(os, "O_DIRECTORY"):
        yield None
        return
    try:
        descriptor = os.open(path, FOLDER_FLAGS)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EMLINK) or _is_link(path, None):
            raise FileAccessError(f"{path} is a symbolic link, not followed: nothing is read through it") from None
        if error.errno == errno.ENOTDIR:
            raise FileAccessError(f"{path} is not a folder") from None
        raise
    try:
        yield descriptor
    finally:
        os.close(descriptor)


@contextmanager
def atomic_file(
    path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None, sync: bool = True
) -> Iterator:
    """Write ``path`` all at once: yield a new temporary file beside it, then fsync it and ``os.replace`` it onto
    ``path``.

    The temporary file has a random name and is created with :func:`create_new_file` (never an existing
    file or a planted symbolic link); if ``path`` is a symbolic link, the link itself is replaced, never
    its target. On any error the temporary file is removed and ``path`` is unchanged.

    Args:
        path: The file to (re)place.
        mode: ``"wb"`` or ``"w"``.
        encoding: For ``"w"``.
        sync: fsync the file before the rename.

    Example:
        >>> with atomic_file("manifest.json", "w", encoding="utf-8") as handle:  # doctest: +SKIP
        ...     handle.write("{}")
    """
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    while True:
        temporary = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            handle = create_new_file(temporary, mode, encoding)
            break
        except FileExistsError:  # pragma: no cover - 2^48 names
            continue
    try:
        with handle:
            yield handle
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def split_lines(content: str) -> list[str]:
    """``content`` cut after each ``\\n``, line ends kept (unlike ``str.splitlines``, no other separator).

    >>> split_lines("a\\r\\nb\\u2028still b\\x85\\fb\\nc")
    ['a\\r\\n', 'b\\u2028still b\\x85\\x0cb\\n', 'c']
    """
    lines = content.split("\n")
    last = lines.pop()
    return [line + "\n" for line in lines] + ([last] if last else [])


def _open_regular(path: str):
    """``path`` opened for reading in binary; only a regular file (a device, FIFO or socket would never end, or
    block)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"input file not found: {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"input is a directory, not a file: {path}")
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO does not block the open
    except OSError as error:
        raise FileAccessError(f"cannot read {path}: {error.strerror or error}.") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise FileAccessError(
            f"cannot read {path}: not a regular file (a device, pipe or socket); "
            "give a text file, or '-' to read standard input."
        )
    return os.fdopen(descriptor, "rb")


def _binary_lines(path: str):
    """``(name, lines)``: the raw lines of ``path`` (``"-"``: standard input), each ending in ``\\n`` but the last,
    streamed."""
    if path == "-":
        data = getattr(sys.stdin, "buffer", None)
        if data is None:  # a text stream without bytes (e.g. replaced in tests): re-check its characters
            return "standard input", iter(
                [line.encode("utf-8", "surrogateescape") for line in split_lines(sys.stdin.read())]
            )
        return "standard input", iter(data)
    handle = _open_regular(path)

    def lines():
        with handle:
            try:
                yield from handle
            except OSError as error:
                raise FileAccessError(f"cannot read {path}: {error.strerror or error}.") from None

    return path, lines()


def _decoded_lines(path: str):
    """The lines of ``path`` decoded as UTF-8 one by one (byte-order mark included), never the whole file at once."""
    name, raw_lines = _binary_lines(path)
    done_bytes = 0
    for number, raw in enumerate(raw_lines, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataFormatError(
                f"{name} is not UTF-8 text ({error.reason} at byte {done_bytes + error.start}, line {number})."
            ) from None
        done_bytes += len(raw)


def _read_raw(path: str) -> str:
    """The whole file decoded as UTF-8 (``"-"``: standard input's bytes), byte-order mark included."""
    return "".join(_decoded_lines(path))


def read_file(path: str) -> str:
    """The content of a UTF-8 text file (``"-"``: standard input), without a leading byte-order mark.

    Clear errors for a missing file, a directory, a device or pipe, a file that cannot be read
    (:class:`FileAccessError`) and bytes that are not UTF-8 (``ValueError``, also for standard input).
    """
    return _read_raw(path).removeprefix(BOM)


def file_lines(path: str) -> Iterator[tuple[int, int, str]]:
    """``(line number, file offset, line)`` for each line of a UTF-8 file (see the module notes), line ends kept;
    streamed.

    Offsets are character offsets in the file as decoded, a leading byte-order mark included. Only regular
    files (and ``"-"``, standard input) are read: a device such as ``/dev/zero`` is a :class:`FileAccessError`.
    """
    offset = 0
    for number, raw in enumerate(_decoded_lines(path), start=1):
        if number == 1 and raw.startswith(BOM):
            raw, offset = raw[1:], 1
        yield number, offset, raw
        offset += len(raw)


def read_texts(
    paths: Sequence[str],
    split: str = "line",
    *,
    fmt: str | None = None,
    text_field: str = "text",
    report: Callable[[str, str], None] | None = None,
) -> list[TextRecord]:
    """Cut files into texts, one per line or per paragraph (blank-line separated); blank ones are skipped.

    A JSONL file (:func:`is_jsonl`, or ``fmt="jsonl"``; ``fmt="text"``: never) gives the ``text_field`` of each of
    its objects, as the corpus index reads it (:func:`jsonl_records`). With ``split="auto"``,
    :func:`guess_split` decides per file, and the choice is logged (logger ``slice_st.text``) and passed to
    ``report(path, mode)``.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = path.write_text("first line\\n\\nsecond\\nstill second\\n")
    >>> [(r.line, r.text) for r in read_texts([str(path)], "paragraph")]
    [(1, 'first line'), (3, 'second\\nstill second')]
    """
    if split not in SPLITS:
        raise SpanInputError(f"split must be 'auto', 'line' or 'paragraph', got {split!r}.")
    records: list[TextRecord] = []
    for path in paths:
        if fmt == "jsonl" or (fmt is None and is_jsonl(path)):
            for number, offset, record in jsonl_records(path):
                text = record.get(text_field)
                if not isinstance(text, str):
                    raise CorpusError(f"{path}, line {number}: text field {text_field!r} is missing or not a string.")
                if text.strip():
                    records.append(TextRecord(path, number, offset, text))
            continue
        lines = file_lines(path)  # streamed; "auto" looks at the whole file first, so it keeps its lines
        mode = split
        if split == "auto":
            lines = list(lines)
            mode = guess_split(raw for _, _, raw in lines)
            logger.info("%s: --split auto reads it as one text per %s", path, mode)
            if report is not None:
                report(path, mode)
        records.extend(_cut(path, lines, mode))
    return records


def _cut(path: str, lines: Iterable[tuple[int, int, str]], mode: str) -> Iterator[TextRecord]:
    """The texts of one file's lines: one per non-blank line, or one per paragraph."""
    block: list[str] = []
    block_start, block_line = 0, 0
    for number, offset, raw in lines:
        text = raw.rstrip("\r\n")
        if mode == "line":
            if text.strip():
                yield TextRecord(path, number, offset, text)
        elif text.strip():
            if not block:
                block_start, block_line = offset, number
            block.append(raw)
        elif block:
            yield _paragraph(path, block_line, block_start, block)
            block = []
    if block:
        yield _paragraph(path, block_line, block_start, block)


def is_jsonl(path: str) -> bool:
    """Whether ``path`` is read as JSONL (its name ends in one of :data:`JSONL_SUFFIXES`, any case).

    >>> is_jsonl("tickets.JSONL"), is_jsonl("notes.txt"), is_jsonl("-")
    (True, False, False)
    """
    return path.lower().endswith(JSONL_SUFFIXES)


def jsonl_records(path: str) -> Iterator[tuple[int, int, dict]]:
    """``(line number, file offset, object)`` for each non-blank line of a JSONL file; streamed.

    A line that is not JSON, or not a JSON object, is a :class:`~slice_st.errors.CorpusError` naming the file
    and the line (nesting too deep for the parser too).
    """
    for number, offset, raw in file_lines(path):
        line = raw.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as error:
            reason = error if isinstance(error, ValueError) else "nested too deeply"
            raise CorpusError(f"{path}, line {number}: not valid JSON ({reason}).") from None
        if not isinstance(record, dict):
            raise CorpusError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}.")
        yield number, offset, record


#: ``guess_split``: the widest hard-wrapped line, indentation included (text is wrapped at 60-120 columns).
WRAPPED_MAX_WIDTH = 120
#: ``guess_split``: the narrowest width text is wrapped to (shorter lines are phrases, names, headings).
WRAPPED_MIN_WIDTH = 40
#: ``guess_split``: the share of inner line breaks that must be wrapping breaks.
WRAPPED_SHARE = 0.6
#: ``guess_split``: how much shorter than its neighbours a line a person wrapped by hand may end mid-sentence.
WRAPPED_SLACK = 10
#: ``guess_split``: the share of lines that must open alike (a date, a time, a number) or split into the same
#: number of fields for a file to be one record per line.
RECORD_SHARE = 0.6
#: Field separators of one-record-per-line files (CSV, TSV, pipe or semicolon tables).
_SEPARATORS = (",", "\t", "|", ";")
#: A line that ends a sentence or a clause: final punctuation, maybe followed by closing quotes/brackets.
_LINE_END = re.compile(r"[.!?…:;][\"'”’)\]]*\s*$")


def guess_split(lines: Iterable[str]) -> str:
    """``"paragraph"`` when a text's lines are hard-wrapped (a paragraph broken over several lines), else ``"line"``.

    It looks at each line break between two lines of the same indentation inside a block of non-blank
    lines. The break is a *wrapping* break when the next line's first word would not have fitted on the
    line: the line plus that word is wider than its neighbours (two lines either side, the width it
    was wrapped to, at least :data:`WRAPPED_MIN_WIDTH`; indentation counts, as on screen); a line that
    stops mid-sentence may fall :data:`WRAPPED_SLACK` characters short (wrapped by hand). Lines are
    hard-wrapped when they are not records, at least :data:`WRAPPED_SHARE` of the breaks are wrapping
    breaks and 90% of the lines are at most :data:`WRAPPED_MAX_WIDTH` characters wide. This reads ``man``
    pages (justified), ``pydoc`` output (ragged, indented, code examples among the prose) and wrapped
    e-mails or READMEs as paragraphs.

    Records, one per line, stay ``"line"`` whatever their widths: log lines (most lines open alike, with
    a date, a time or a number: ``2026-11-25 10:01:02 INFO …``, ``Nov 25 10:01:02 host …``), CSV-like lines
    (most lines hold the same number of ``, ; | tab`` separators), chat turns, tickets, phrase lists.
    :func:`read_texts` logs the choice for each file (logger ``slice_st.text``) and can report it.

    >>> guess_split(["Agent: how can I help?\\n", "Customer: my bag was lost.\\n"])
    'line'
    >>> wrapped = ["The installer copies the files into the folder that you chose in the\\n",
    ...            "first step, then asks whether the service should start when the computer\\n",
    ...            "boots. Choose yes unless another program already uses the same port.\\n", "\\n",
    ...            "To remove it, open the control panel and select the entry named after\\n", "the product.\\n"]
    >>> guess_split(wrapped)
    'paragraph'
    """
    texts = [line.rstrip("\r\n").rstrip() for line in lines]
    nonblank = sorted(len(text) for text in texts if text.strip())
    if len(nonblank) < 2 or nonblank[int(0.9 * (len(nonblank) - 1))] > WRAPPED_MAX_WIDTH:
        return "line"
    if _records([text for text in texts if text.strip()]):
        return "line"
    breaks = wrapping = 0
    for run in _runs(texts):
        for number, (line, following) in enumerate(zip(run, run[1:])):
            width = max(len(text) for text in run[max(0, number - 2) : number + 3])
            word = following.split()[0]
            long_word = len(word) > WRAPPED_MIN_WIDTH // 2 and len(line) < width - WRAPPED_MIN_WIDTH // 2
            if width < WRAPPED_MIN_WIDTH or long_word:
                continue  # short lines (names, code), or a short line before a huge word: no evidence either way
            slack = 0 if _LINE_END.search(line) else WRAPPED_SLACK
            breaks += 1
            wrapping += len(line) + 1 + len(word) > width - slack
    return "paragraph" if breaks >= 2 and wrapping >= WRAPPED_SHARE * breaks else "line"


def _runs(texts: list[str]) -> Iterator[list[str]]:
    """Runs of two or more lines with text and the same indentation (a line of only ``|`` or spaces is blank, as
    ``pydoc`` draws them; a heading and its indented body are two runs)."""
    run: list[str] = []
    for text in texts + [""]:
        has_text = _WORD.search(text) is not None
        if has_text and run and _indent(text) == _indent(run[-1]):
            run.append(text)
            continue
        if len(run) > 1:
            yield run
        run = [text] if has_text else []


_WORD = re.compile(r"\w")


def _indent(text: str) -> int:
    """Where the text of a line starts (``pydoc`` draws a class's members behind ``|``)."""
    return len(text) - len(text.lstrip(" \t|"))


def _records(texts: list[str]) -> bool:
    """Whether most lines open alike with a digit in the opening (a log's date or time, a numbered list) or split
    into the same number of fields (CSV-like)."""
    texts = [text.lstrip(" \t|") for text in texts]  # pydoc's class drawing is not a field separator
    openings: dict[str, int] = {}
    for text in texts:
        shape = re.sub(r"(\d)\d*|([^\W\d])[^\W\d]*", lambda m: "0" if m.group(1) else "a", text[:24])
        openings[shape] = openings.get(shape, 0) + 1
    shape, count = max(openings.items(), key=lambda item: item[1])
    if "0" in shape and count >= RECORD_SHARE * len(texts):
        return True
    for separator in _SEPARATORS:
        fields: dict[int, int] = {}
        for text in texts:
            fields[text.count(separator)] = fields.get(text.count(separator), 0) + 1
        number, count = max(fields.items(), key=lambda item: item[1])
        if number and count >= max(2, 0.8 * len(texts)):
            return True
    return False


def _paragraph(path: str, line: int, offset: int, lines: list[str]) -> TextRecord:
    """A paragraph is the file's own characters (inner ``\\r\\n`` kept), so offsets inside it are file offsets."""
    return TextRecord(path, line, offset, "".join(lines).rstrip("\r\n"))


def expand_paths(
    paths: Sequence[str], suffixes: Sequence[str] = CORPUS_SUFFIXES, *, follow_links: bool = False
) -> list[str]:
    """The input files ``paths`` name: a file stays, a folder stands for its files (recursively, sorted, those ending
    in ``suffixes``; hidden ones left out), a glob pattern (``*``, ``?``, ``[``, ``**``) for the files it matches.
    ``-`` (standard input) and a missing path (its reader names it) stay.

    What a folder or pattern stands for stays inside it and is read once: linked folders are not entered
    (so ``**`` never loops), a file reached twice (through a link inside the folder) is listed once, and a
    file link pointing outside the folder (or outside a pattern's fixed leading folder) is a
    :class:`~slice_st.errors.FileAccessError` unless ``follow_links``. A sub-folder that cannot be read is a
    :class:`~slice_st.errors.FileAccessError`, as is a folder or pattern that names no file (``ValueError``).

    >>> expand_paths(["-"])
    ['-']
    """
    found: list[str] = []
    for path in paths:
        if path == "-" or os.path.isfile(path) or (os.path.exists(path) and not os.path.isdir(path)):
            found.append(path)
        elif os.path.isdir(path):
            files = _inside(path, _walk(path, tuple(suffixes)), follow_links)
            if not files:
                raise FileNotFoundError(f"no {', '.join(suffixes)} file in the folder {path}.")
            found.extend(files)
        elif glob.has_magic(path):
            root, parts = _fixed_folder(path)
            files = _inside(root or os.curdir, sorted(_glob(root, parts)), follow_links)
            if not files:
                raise FileNotFoundError(f"no file matches {path}.")
            found.extend(files)
        else:
            found.append(path)
    return found


def _scan(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder or os.curdir) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as error:
        raise FileAccessError(f"cannot read the folder {folder or os.curdir}: {error.strerror or error}.") from None


def _walk(folder: str, suffixes: tuple[str, ...]) -> Iterator[str]:
    """The files under ``folder`` ending in ``suffixes``, depth first in sorted order; linked folders not entered."""
    for entry in _scan(folder):
        if entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(entry.path, suffixes)
        elif entry.name.lower().endswith(suffixes) and entry.is_file():
            yield entry.path


def _fixed_folder(pattern: str) -> tuple[str, list[str]]:
    """A pattern's leading folder without wildcards and its other parts: ``t2/**/*.txt`` → ``("t2", ["**",
    "*.txt"])``."""
    parts = pattern.split(os.sep)
    fixed = 0
    while fixed < len(parts) - 1 and not glob.has_magic(parts[fixed]):
        fixed += 1
    root = os.sep.join(parts[:fixed]) or (os.sep if pattern.startswith(os.sep) else "")
    return root, parts[fixed:]


def _glob(folder: str, parts: list[str]) -> Iterator[str]:
    """Paths under ``folder`` matching ``parts``; ``**`` spans any number of folders but never enters a link."""
    if not parts:
        if os.path.isfile(folder):
            yield folder
        return
    head, rest = parts[0], parts[1:]
    join = (lambda name: os.path.join(folder, name)) if folder else (lambda name: name)
    if head == "**":
        yield from _glob(folder, rest)
        for entry in _scan(folder):
            if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                yield from _glob(join(entry.name), parts)
    elif glob.has_magic(head):
        for entry in _scan(folder):
            if fnmatch.fnmatchcase(entry.name, head) and (
                not entry.name.startswith(".") or head.startswith(".")
            ):  # as glob: a wildcard does not match a hidden name
                yield from _glob(join(entry.name), rest)
    elif head and os.path.lexists(join(head)):
        yield from _glob(join(head), rest)


def _inside(folder: str, files: Iterable[str], follow_links: bool) -> list[str]:
    """``files`` once each (a file reached twice through links is listed once), refusing a link out of ``folder``."""
    top = os.path.realpath(folder)
    kept: list[str] = []
    seen: set[tuple[int, int]] = set()
    for path in files:
        real = os.path.realpath(path)
        if not follow_links and os.path.commonpath([top, real]) != top:
            raise FileAccessError(
                f"{path} leads outside {folder} (to {real}): not read. Name that file itself, or follow links "
                "out of the folder (follow_links=True, --follow-links)."
            )
        info = os.stat(path)
        if (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            kept.append(path)
    return kept


def csv_safe(value: object) -> object:
    """A CSV cell a spreadsheet shows as text: a string starting with ``= + - @``, a tab or a carriage return gets a
    leading ``'`` (spreadsheets would run it as a formula: ``=HYPERLINK(…)``); other values are unchanged.

    >>> [csv_safe(value) for value in ("=1+1", "@SUM(A1)", "-2", "plain", -2, 0.5)]
    ["'=1+1", "'@SUM(A1)", "'-2", 'plain', -2, 0.5]
    """
    if isinstance(value, str) and value[:1] in _FORMULA_STARTS:
        return "'" + value
    return value


_FORMULA_STARTS = frozenset("=+-@\t\r")


def one_line(value: str) -> str:
    """``value`` with every run of whitespace (newlines included) turned into one space, stripped.

    >>> one_line("  two\tspaced   words ")
    'two spaced words'
    """
    return " ".join(value.split())


def detokenize(text: str) -> str:
    """Undo SNLI's spaces before punctuation (``"packages ."`` → ``"packages."``)."""
    text = one_line(text)
    for mark in (" .", " ,", " !", " ?", " ;", " :", " 's", " n't", " '"):
        text = text.replace(mark, mark[1:])
    return text


#: A place a sentence might end: final punctuation before whitespace, or a line break. Texts without one
#: are a single sentence, and skip the segmenter (most training texts are single sentences).
_MAYBE_END = re.compile(r"[.!?…][\"'”’)\]]*\s|\n")
#: Closing quotes/brackets that pysbd sometimes leaves at the start of the next sentence (``quote." Next``).
_LEADING_CLOSERS = re.compile(r"^([\"'”’)\]]+)(\s+|$)")


@functools.lru_cache(maxsize=1)
def _segmenter():
    pysbd = require("pysbd", "train", "sentence splitting")
    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, stripped, by pysbd (rule-based, English: "Mr.", "U.S.", "e.g.", decimals and
    initials do not end a sentence; a line break does).

    >>> split_sentences("It rained. We stayed in! Did you? 'Yes.' Fine")
    ['It rained.', 'We stayed in!', 'Did you?', "'Yes.'", 'Fine']
    >>> split_sentences("Mr. Howard met the U.S. Military, e.g. for talks. They agreed.")
    ['Mr. Howard met the U.S. Military, e.g. for talks.', 'They agreed.']
    """
    if not text.strip():
        return []
    if not _MAYBE_END.search(text.strip()):
        return [text.strip()]
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


_RAY_ADDRESS = re.compile(r"(auto|local|ray://[\w.-]+:\d+|[\w.-]+:\d+)")


def is_ray_address(value: object) -> bool:
    """Whether ``value`` is a Ray address as ``slice-st … --ray ADDRESS`` takes it: ``auto``, ``local``, ``HOST:PORT``, ``ray://HOST:PORT``.

    >>> is_ray_address("ray://head:10001"), is_ray_address("auto"), is_ray_address("calls.txt")
    (True, True, False)
    """
    return isinstance(value, str) and _RAY_ADDRESS.fullmatch(value) is not None
