"""File I/O of the library and the command line: read UTF-8 files and JSONL safely, expand folders and globs, write
files atomically, CSV rows. A **line** ends at ``\\n`` (``\\r\\n`` too), so line numbers are those of ``grep -n``; a
leading byte-order mark is never part of a line, though it counts in file offsets."""

from __future__ import annotations

import csv
import errno
import fnmatch
import glob
import json
import os
import secrets
import stat
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress

from slice_st.errors import CorpusError, DataFormatError, FileAccessError

#: Files read as JSONL (one JSON object per line) wherever a corpus is read.
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.txt")
#: Files a folder given as input stands for (searched recursively; hidden files and folders left out).
CORPUS_SUFFIXES = (".txt", ".text", ".md", ".rst", ".jsonl", ".ndjson")
# ``os.open`` flags: a new file (never an existing one, never through a planted link), a file read where it is
# (never through a link; a FIFO does not block) and a folder opened where it is.
_NOFOLLOW, _CLOEXEC = getattr(os, "O_NOFOLLOW", 0), getattr(os, "O_CLOEXEC", 0)
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
READ_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC


def check_output(
    path: str | os.PathLike, what: str = "output", *, folder: bool = True, full: str = ""
) -> str:
    """``path``, checked before any work (nothing is created): a writable folder (``folder=False``: file) or a path
    that can be created, else a :class:`FileAccessError` naming ``what``. ``full``: refuse a folder that holds files,
    saying why and how to go on (empty: files are fine, as with ``--overwrite``)."""
    path, (other, kind) = os.fspath(path), ("file", "folder") if folder else ("folder", "file")
    if not os.path.exists(path):  # its nearest existing ancestor must be a writable folder
        parent = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise FileAccessError(f"cannot create {path}: {parent} is a file, not a folder.")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise FileAccessError(
                f"cannot create {path}: {parent} is not writable (permission denied)."
            )
    elif os.path.isdir(path) != folder:
        raise FileAccessError(f"{what} {path} is a {other}, not a {kind}.")
    elif not os.access(path, os.W_OK | (os.X_OK if folder else 0)):
        raise FileAccessError(f"{what} {path} is not writable (permission denied).")
    elif full and folder and os.listdir(path):
        raise FileAccessError(f"{what} {path} is not empty: {full}")
    return path


def check_not_link(
    path: str | os.PathLike, what: str = "output", purpose: str = "to write into"
) -> str:
    """``path``, or a :class:`FileAccessError` for a symbolic link (``link/`` too): nothing goes where a link points."""
    normal = os.path.normpath(os.fspath(path))
    if os.path.islink(normal):
        raise FileAccessError(
            f"{what} {normal} is a symbolic link: name the real folder {purpose}."
        )
    return path


def append_csv_row(folder: str, file_name: str, header: Sequence[str], row: Sequence) -> str:
    """Append ``row`` to the CSV file ``folder/file_name`` (a new one starts with ``header``); returns its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, file_name)
    rows = [row] if os.path.isfile(path) else [header, row]
    with open(path, "a", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


def create_new_file(path: str, mode: str = "wb", encoding: str | None = None):
    """Open a file that must not exist yet: anything at ``path``, a planted link too, is a ``FileExistsError``."""
    return os.fdopen(os.open(path, NEW_FILE_FLAGS, 0o666), mode, encoding=encoding)


def open_regular_file(
    path: str | os.PathLike,
    size: int | None = None,
    *,
    folder: int | None = None,
    follow_links: bool = False,
):
    """``path`` open for binary reading if it is a regular file of ``size`` bytes (``None``: any), checked on the very
    descriptor read, else a :class:`FileAccessError`; a link is refused unless ``follow_links``. ``folder``: an
    :func:`open_folder` descriptor ``path`` is inside."""
    path = os.fspath(path)
    descriptor = _open(
        path, READ_FILE_FLAGS & ~_NOFOLLOW if follow_links else READ_FILE_FLAGS, folder
    )
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise FileAccessError(
                f"{path} is not a regular file: a folder, device, pipe or socket is never read"
            )
        if size is not None and found.st_size != size:
            raise FileAccessError(f"{path} has {found.st_size} bytes, not the {size} expected")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _open(path: str, flags: int, folder: int | None = None) -> int:
    """``os.open``; a link (with ``O_NOFOLLOW``) or a file opened as a folder is a :class:`FileAccessError`."""
    try:
        return os.open(path, flags, dir_fd=folder)
    except OSError as error:
        # Linux says ENOTDIR, not ELOOP, for a link opened O_DIRECTORY|O_NOFOLLOW (only by path, in open_folder)
        link = error.errno in (errno.ELOOP, errno.EMLINK) or (
            flags == FOLDER_FLAGS and os.path.islink(path)
        )
        if flags & _NOFOLLOW and link:
            raise FileAccessError(
                f"{path} is a symbolic link, not followed: nothing is read through it"
            ) from None
        if error.errno == errno.ENOTDIR and flags == FOLDER_FLAGS:
            raise FileAccessError(f"{path} is not a folder") from None
        raise


@contextmanager
def open_folder(path: str | os.PathLike) -> Iterator[int | None]:
    """A descriptor of the folder ``path`` itself, never a link's target, to open its files even if it is swapped for a
    link later; ``None`` where the system cannot (callers use paths)."""
    if os.open not in os.supports_dir_fd or not hasattr(os, "O_DIRECTORY"):
        yield None
        return
    descriptor = _open(os.fspath(path), FOLDER_FLAGS)
    try:
        yield descriptor
    finally:
        os.close(descriptor)


@contextmanager
def atomic_file(
    path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None, sync: bool = True
):
    """Write ``path`` all at once: a new temporary file beside it (:func:`create_new_file`), then (fsync and)
    ``os.replace``; a link at ``path`` is replaced, never its target; on any error ``path`` is unchanged."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    # 2^64 names: never one that exists
    temporary = os.path.join(folder, f".{name}.{secrets.token_hex(8)}.tmp")
    handle = create_new_file(temporary, mode, encoding)
    try:
        with handle:
            yield handle
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary)
        raise


def _raw_lines(path: str) -> Iterator[bytes]:
    """The lines of ``path`` (``"-"``: standard input) as bytes, streamed; only a regular file is read."""
    if path == "-":
        yield from sys.stdin.buffer
        return
    if not os.path.exists(path):
        raise FileNotFoundError(f"input file not found: {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"input is a directory, not a file: {path}")
    try:
        with open_regular_file(path, follow_links=True) as handle:
            yield from handle
    except FileAccessError:
        raise FileAccessError(
            f"cannot read {path}: not a regular file (a device, pipe or socket); "
            "give a text file, or '-' to read standard input."
        ) from None
    except OSError as error:  # opening or reading
        raise FileAccessError(f"cannot read {path}: {error.strerror or error}.") from None


def file_lines(path: str) -> Iterator[tuple[int, int, str]]:
    """``(line number, file offset, line)`` per line of a UTF-8 file (``"-"``: standard input), streamed; offsets count
    characters, a byte-order mark too. Unreadable: :class:`FileAccessError`; not UTF-8: :class:`DataFormatError`."""
    name = "standard input" if path == "-" else path
    offset = done = 0
    for number, raw in enumerate(_raw_lines(path), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataFormatError(
                f"{name} is not UTF-8 text ({error.reason} at byte {done + error.start}, line {number})."
            ) from None
        done += len(raw)
        if number == 1 and line.startswith("\ufeff"):  # a byte-order mark
            line, offset = line[1:], 1
        yield number, offset, line
        offset += len(line)


def read_file(path: str) -> str:
    """The content of a UTF-8 text file (``"-"``: standard input), without a byte-order mark."""
    return "".join(line for _, _, line in file_lines(path))


def is_jsonl(path: str) -> bool:
    """Whether ``path`` is read as JSONL (its name ends in one of :data:`JSONL_SUFFIXES`, any case)."""
    return path.lower().endswith(JSONL_SUFFIXES)


def jsonl_records(path: str) -> Iterator[tuple[int, int, dict]]:
    """``(line number, file offset, object)`` per non-blank JSONL line; not a JSON object: :class:`CorpusError`."""
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
            raise CorpusError(
                f"{path}, line {number}: expected a JSON object, got {type(record).__name__}."
            )
        yield number, offset, record


def expand_paths(
    paths: Sequence[str], suffixes: Sequence[str] = CORPUS_SUFFIXES, *, follow_links: bool = False
) -> list[str]:
    """The input files ``paths`` name: a file (or ``-``, or a missing path) stays; a folder stands for its files
    ending in ``suffixes`` (recursively, sorted, hidden ones left out), a glob pattern (``**`` too) for its matches.

    Each is listed once and stays inside the folder or pattern: linked folders are not entered, a file link out of
    it is a :class:`FileAccessError` unless ``follow_links``. A folder or pattern naming no file: ``FileNotFoundError``.
    """
    found: list[str] = []
    for path in paths:
        # a folder: its files, as the pattern FOLDER/**/* names them
        if path != "-" and os.path.isdir(path):
            root = path
            files = [f for f in _glob(path, ["**", "*"]) if f.lower().endswith(tuple(suffixes))]
            missing = f"no {', '.join(suffixes)} file in the folder {path}."
        # its fixed folder, then the rest
        elif path != "-" and glob.has_magic(path) and not os.path.exists(path):
            parts = path.split(os.sep)
            fixed = next(index for index, part in enumerate(parts) if glob.has_magic(part))
            root = os.sep.join(parts[:fixed]) or (os.sep if path.startswith(os.sep) else "")
            files, missing = list(_glob(root, parts[fixed:])), f"no file matches {path}."
        else:  # a file, or a missing path (opening it says so)
            found.append(path)
            continue
        files = _inside(root or os.curdir, sorted(files), follow_links)
        if not files:
            raise FileNotFoundError(missing)
        found.extend(files)
    return found


def _scan(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder or os.curdir) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as error:
        raise FileAccessError(
            f"cannot read the folder {folder or os.curdir}: {error.strerror or error}."
        ) from None


def _glob(folder: str, parts: list[str]) -> Iterator[str]:
    """Paths under ``folder`` matching ``parts``; ``**`` spans any number of folders but never enters a link."""
    if not parts:
        if os.path.isfile(folder):
            yield folder
        return
    head, rest = parts[0], parts[1:]
    if head == "**":
        yield from _glob(folder, rest)
        for entry in _scan(folder):
            if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                yield from _glob(os.path.join(folder, entry.name), parts)
    elif glob.has_magic(head):
        for entry in _scan(folder):
            # as glob: a wildcard does not match a hidden name
            if fnmatch.fnmatchcase(entry.name, head) and (
                not entry.name.startswith(".") or head.startswith(".")
            ):
                yield from _glob(os.path.join(folder, entry.name), rest)
    elif head and os.path.lexists(os.path.join(folder, head)):
        yield from _glob(os.path.join(folder, head), rest)


def _inside(folder: str, files: Iterable[str], follow_links: bool) -> list[str]:
    """``files`` once each (a file reached twice through links is listed once), refusing a link out of ``folder``."""
    top = os.path.realpath(folder)
    kept: dict[tuple[int, int], str] = {}  # (device, inode): the first path to that file
    for path in files:
        real = os.path.realpath(path)
        if not follow_links and os.path.commonpath([top, real]) != top:
            raise FileAccessError(
                f"{path} leads outside {folder} (to {real}): not read. Name that file itself, or follow links "
                "out of the folder (follow_links=True, --follow-links)."
            )
        info = os.stat(path)
        kept.setdefault((info.st_dev, info.st_ino), path)
    return list(kept.values())


def short_names(paths: Iterable[str]) -> dict[str, str]:
    """Each of ``paths`` as a user is shown it: its shortest ending (the file name, then its folders) that no other of
    ``paths`` ends with; a path that ends another one is shown whole.

    >>> short_names(["corpus/a/x.txt", "corpus/b/x.txt", "corpus/y.txt"])
    {'corpus/a/x.txt': 'a/x.txt', 'corpus/b/x.txt': 'b/x.txt', 'corpus/y.txt': 'y.txt'}
    """
    parts = {path: path.replace(os.sep, "/").split("/") for path in dict.fromkeys(paths)}
    endings = Counter(
        tuple(split[-depth:]) for split in parts.values() for depth in range(1, len(split) + 1)
    )
    shown = {}
    for path, split in parts.items():
        depth = next(
            (d for d in range(1, len(split)) if endings[tuple(split[-d:])] == 1), len(split)
        )
        shown[path] = path if depth == len(split) else "/".join(split[-depth:])
    return shown


def csv_safe(value: object) -> object:
    """A CSV cell a spreadsheet shows as text: a string starting with ``= + - @``, tab or CR gets a leading ``'``."""
    formula = isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r")
    return f"'{value}" if formula else value
