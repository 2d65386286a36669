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
import functools
import importlib
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

from slice_st.errors import FileAccessError, MissingExtraError

#: How a text file is cut into texts: one per line, one per paragraph (blank-line separated), or ``auto``
#: (:func:`guess_split`, per file).
SPLITS = ("auto", "line", "paragraph")

BOM = "\ufeff"


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
            raise ValueError(
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


def read_texts(paths: Sequence[str], split: str = "line") -> list[TextRecord]:
    """Cut files into texts, one per line or per paragraph (blank-line separated); blank ones are skipped.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = path.write_text("first line\\n\\nsecond\\nstill second\\n")
    >>> [(r.line, r.text) for r in read_texts([str(path)], "paragraph")]
    [(1, 'first line'), (3, 'second\\nstill second')]
    """
    if split not in SPLITS:
        raise ValueError(f"split must be 'auto', 'line' or 'paragraph', got {split!r}.")
    records: list[TextRecord] = []
    for path in paths:
        block: list[str] = []
        block_start, block_line = 0, 0
        lines = file_lines(path)  # streamed; "auto" looks at the whole file first, so it keeps its lines
        if split == "auto":
            lines = list(lines)
        mode = guess_split(raw for _, _, raw in lines) if split == "auto" else split
        for number, offset, raw in lines:
            text = raw.rstrip("\r\n")
            if mode == "line":
                if text.strip():
                    records.append(TextRecord(path, number, offset, text))
            elif text.strip():
                if not block:
                    block_start, block_line = offset, number
                block.append(raw)
            elif block:
                records.append(_paragraph(path, block_line, block_start, block))
                block = []
        if block:
            records.append(_paragraph(path, block_line, block_start, block))
    return records


#: A line that ends a sentence or a clause: final punctuation, maybe followed by closing quotes/brackets.
_LINE_END = re.compile(r"[.!?…:;][\"'”’)\]]*\s*$")
#: ``guess_split``: the shortest median length of a hard-wrapped paragraph's inner lines (wrapping is at 60-100
#: columns).
WRAPPED_MIN_LENGTH = 40
#: ``guess_split``: the widest hard-wrapped line (text is wrapped at 60-100 columns).
WRAPPED_MAX_WIDTH = 100


def guess_split(lines: Iterable[str]) -> str:
    """``"paragraph"`` when a text's lines are hard-wrapped (a paragraph broken over several lines), else ``"line"``.

    The heuristic looks at the *inner* lines: non-blank lines followed by another non-blank line (a
    line inside a block). Lines are hard-wrapped when (1) at least half of the non-blank lines are inner
    lines, (2) at least 60% of the inner lines end mid-sentence (no ``. ! ? … : ;`` at their end) and
    (3) the inner lines' (lower) median length is at least :data:`WRAPPED_MIN_LENGTH` characters and (4) they
    are filled to a width: the longest is at most :data:`WRAPPED_MAX_WIDTH` characters and at least 75% of
    them are within 20 characters of it. One text per line (chat turns, tickets, a list of phrases: short lines, lines
    ending a
    sentence, or lines of any length) stays ``"line"``.

    >>> guess_split(["Agent: how can I help?\\n", "Customer: my bag was lost.\\n"])
    'line'
    >>> wrapped = ["The installer copies the files into the folder that you chose in the\\n",
    ...            "first step, then asks whether the service should start when the computer\\n",
    ...            "boots. Choose yes unless another program already uses the same port.\\n", "\\n",
    ...            "To remove it, open the control panel and select the entry named after\\n", "the product.\\n"]
    >>> guess_split(wrapped)
    'paragraph'
    """
    texts = [line.rstrip("\r\n") for line in lines]
    filled = [bool(text.strip()) for text in texts]
    inner = [texts[i] for i in range(len(texts) - 1) if filled[i] and filled[i + 1]]
    nonblank = sum(filled)
    if not inner or 2 * len(inner) < nonblank:
        return "line"
    open_ended = sum(1 for text in inner if not _LINE_END.search(text))
    lengths = sorted(len(text.strip()) for text in inner)
    if open_ended < 0.6 * len(inner) or lengths[(len(lengths) - 1) // 2] < WRAPPED_MIN_LENGTH:
        return "line"
    width = lengths[-1]  # the wrapping width: a wrapped line breaks before the word that would pass it
    if width > WRAPPED_MAX_WIDTH or sum(1 for length in lengths if length >= width - 20) < 0.75 * len(lengths):
        return "line"  # lengths all over the place: one text per line, not a paragraph filled to a width
    return "paragraph"


def _paragraph(path: str, line: int, offset: int, lines: list[str]) -> TextRecord:
    """A paragraph is the file's own characters (inner ``\\r\\n`` kept), so offsets inside it are file offsets."""
    return TextRecord(path, line, offset, "".join(lines).rstrip("\r\n"))


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
