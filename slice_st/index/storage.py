"""An index on disk (docs/guides/corpus-index.md, "On disk"): ``manifest.json`` names the data folder a save wrote
before replacing it atomically; writers hold ``DIR/.lock``; readers retry when a save replaced the data under them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Literal

import numpy as np
from numpy.lib import format as npy

from slice_st.config import SpanConfig
from slice_st.errors import FileAccessError, IndexBusyError, IndexFileError, SpanInputError
from slice_st.files import (
    atomic_file,
    check_output,
    create_new_file,
    open_folder,
    open_regular_file,
)

#: 2: the model fingerprint covers every weight, and the data folder records its settings. Format 1 must be rebuilt.
INDEX_FORMAT_VERSION = 2
#: 3: an index with a compressed tier (``compression`` in the manifest); format-2 readers refuse it.
COMPRESSED_FORMAT_VERSION = 3
#: 4: a compressed index without its exact tier (``exact_tier: false``; no unit vectors nor span norms); older
#: readers refuse it.
NO_EXACT_TIER_FORMAT_VERSION = 4
MANIFEST = "manifest.json"
#: In every data folder: the span settings, dtype and model fingerprint the arrays were written with (checked on load).
SETTINGS_FILE = "settings.json"
#: The arrays with one row per unit, then those of every data folder.
UNIT_ARRAYS = ("unit_vectors", "unit_chars", "span_norms")
#: The unit arrays of the exact tier, which an index built with ``exact_tier=False`` does not keep.
EXACT_TIER_ARRAYS = ("unit_vectors", "span_norms")
ARRAYS = (*UNIT_ARRAYS, "segment_units", "segment_docs", "segment_first_unit", "text_offsets")
LOCK_FILE = ".lock"
#: The manifest of a sharded index built on Ray: its plan, and its shards once complete.
SHARD_LIST = "shards.json"
#: In every data folder a save creates: only folders carrying it (or named by the replaced manifest) are removed.
DATA_MARKER = ".slice-st-data"
_MARKER_TEXT = b"written by slice_st.SpanIndex.save; removed with its index version\n"
_DATA_NAME = re.compile(r"data-\d+-[0-9A-Za-z_]+")
# files.atomic_file's name
_TEMPORARY_MANIFEST = re.compile(rf"\.{re.escape(MANIFEST)}\.[0-9a-f]{{16}}\.tmp")
#: Rows (elements) of each array hashed into the manifest's ``samples``, checked on every load.
SAMPLE_ROWS = 4096
#: How often a reader re-reads the manifest when the data it names vanished under it (a save replaced it).
READ_RETRIES = 20
#: The largest ``generation`` a manifest may hold (one save a second for 30,000 years).
MAX_GENERATION = 10**12
_REQUIRED = (
    dict.fromkeys(("data", "model_fingerprint", "dtype"), str)
    | dict.fromkeys(("span_config", "files", "samples"), dict)
    | dict.fromkeys(("units", "documents", "generation"), int)
)
#: Files every data folder holds besides its arrays (and optional calibration and candidate files).
_OTHER_FILES = ("texts.bin", "doc_ids.json", SETTINGS_FILE)

_held = threading.local()


def _holder(lock_path: str) -> str:
    try:
        return read_bytes(lock_path).decode("utf-8").strip() or "another process"
    except (OSError, ValueError):
        return "another process"


@contextmanager
def index_lock(
    path: str | os.PathLike, timeout: float | None = 0, on_wait: Callable[[str], None] | None = None
):
    """Hold ``path/.lock``, the writer lock (re-entrant in a thread; the folder created if needed); ``timeout``: 0
    fails at once, ``None`` waits (``on_wait(holder)`` first), seconds; then IndexBusyError."""
    from filelock import FileLock, Timeout

    path = os.fspath(path)
    key = os.path.realpath(path)
    held = _held.__dict__.setdefault("paths", set())
    if key in held:
        yield
        return
    check_output(path, "index folder")
    created = not os.path.lexists(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise FileAccessError(
            f"cannot create the index folder {path}: {error.strerror or error}."
        ) from None
    lock_path = os.path.join(path, LOCK_FILE)
    if os.path.islink(lock_path) or (os.path.exists(lock_path) and not os.path.isfile(lock_path)):
        raise FileAccessError(
            f"cannot lock the index folder {path}: {lock_path} is not a regular file (a symbolic link?); "
            "remove it (nothing outside the index folder is written through it)."
        )
    lock = FileLock(lock_path)
    busy = f"{path} is being saved by another process ({{holder}}); try again when that save or update has finished."
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            holder = _holder(lock_path)
            if timeout == 0:
                raise IndexBusyError(busy.format(holder=holder)) from None
            if on_wait is not None:
                on_wait(holder)
            try:
                lock.acquire(timeout=-1 if timeout is None else timeout)
            except Timeout:
                raise IndexBusyError(busy.format(holder=_holder(lock_path))) from None
    except OSError as error:
        raise FileAccessError(
            f"cannot lock the index folder {path} ({lock_path}): {error.strerror or error}."
        ) from None
    failed = True
    try:
        with suppress(OSError):  # another descriptor: closing it keeps the flock
            descriptor = os.open(lock_path, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(f"pid {os.getpid()}")
        held.add(key)
        yield
        failed = False
    finally:
        held.discard(key)
        lock.release()
        # a first save that failed (e.g. a full disk): no empty index folder left behind
        if failed and created:
            with suppress(OSError):
                if os.listdir(path) == [LOCK_FILE] and not os.path.islink(lock_path):
                    os.unlink(lock_path)
                    os.rmdir(path)


def write_bytes(path: str, data: bytes | np.ndarray) -> None:
    """Write a new file (an array as ``.npy``) and fsync it; an existing file or link there is ``FileExistsError``."""
    with create_new_file(path) as handle:
        if isinstance(data, np.ndarray):
            np.save(handle, data)
        else:
            handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def save_array(path: str, values: np.ndarray) -> None:
    """:func:`numpy.save` to a new file, fsynced (:func:`write_bytes`)."""
    write_bytes(path, np.asarray(values))


def write_json(path: str, value: Any, indent: int = 1) -> None:
    """Write a JSON file atomically (a new temporary file never written through a link, fsync, ``os.replace``)."""
    with atomic_file(path) as handle:
        handle.write(json.dumps(value, indent=indent, ensure_ascii=False).encode())
    fsync_directory(os.path.dirname(os.path.abspath(path)))


def fsync_directory(path: str) -> None:
    """Make a rename or a new entry in ``path`` durable (no-op where directories cannot be opened or fsynced)."""
    # e.g. Windows, or file systems that refuse fsync on directories
    with suppress(OSError):  # pragma: no cover
        handle = os.open(path, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def commit_data(
    path: str,
    generation: int,
    write: Callable[[str], dict[str, str]],
    manifest: dict[str, Any],
    replaced: str | None,
) -> str:
    """A new data folder filled by ``write(folder)`` (returning the arrays' samples), then the manifest naming it (the
    commit point), then the older data folders removed; returns its name. A failure leaves the previous version."""
    data_dir = None
    try:
        name = f"data-{generation:06d}-{secrets.token_hex(4)}"
        # a name taken (1 in 2^32) fails the save and leaves that folder alone
        os.mkdir(os.path.join(path, name))
        data_dir = os.path.join(path, name)
        write_bytes(os.path.join(data_dir, DATA_MARKER), _MARKER_TEXT)
        samples = write(data_dir)
        files = {
            entry.name: {"bytes": entry.stat().st_size, "sha256": file_digest(entry.path)}
            for entry in sorted(os.scandir(data_dir), key=lambda e: e.name)
            if entry.name != DATA_MARKER
        }
        fsync_directory(data_dir)
        manifest = manifest | {
            "data": name,
            "generation": generation,
            "files": files,
            "samples": samples,
        }
        write_json(os.path.join(path, MANIFEST), manifest, indent=2)
    except BaseException as error:
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
        if not isinstance(error, OSError) or isinstance(error, FileAccessError):
            raise
        # a full disk, an I/O error (numpy's "N requested and M written" has no errno)
        raise FileAccessError(
            f"cannot save the index to {path}: {error.strerror or error} (the previous version is unchanged)."
        ) from error
    with suppress(OSError):  # committed already; the next save retries the clean-up
        for entry in os.scandir(path):
            # a manifest a killed save wrote but never renamed (this save holds the lock)
            if _TEMPORARY_MANIFEST.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                with suppress(OSError):
                    os.unlink(entry.path)
            if entry.name == name or not _DATA_NAME.fullmatch(entry.name):
                continue
            if entry.is_dir(follow_symlinks=False) and (
                entry.name == replaced or os.path.isfile(os.path.join(entry.path, DATA_MARKER))
            ):
                shutil.rmtree(entry.path, ignore_errors=True)
    return name


def file_digest(path: str, size: int | None = None, *, folder: int | None = None) -> str:
    """SHA-256 of a regular file (never a link, device or pipe); reading at most ``size + 1`` bytes given ``size``."""
    # FileAccessError (an OSError): a link, a device, a pipe
    with open_regular_file(path, folder=folder) as handle:
        digest = hashlib.sha256()
        left = float("inf") if size is None else size + 1
        while left > 0 and (block := handle.read(int(min(1 << 20, left)))):
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def array_digest(values: np.ndarray, rows: FileRows | None = None) -> str:
    """SHA-256 of an array's shape, dtype and up to :data:`SAMPLE_ROWS` evenly spread rows (cheap on every load);
    the rows read from ``rows`` (the array's file) when given, never through a memory map.

    >>> array_digest(np.arange(6).reshape(3, 2)) == array_digest(np.arange(6).reshape(3, 2)[[0, 2, 1]])
    False
    """
    values = np.asarray(values)
    digest = hashlib.sha256(f"{values.shape}|{values.dtype.str}".encode())
    if len(values):
        picks = np.unique(
            np.linspace(0, len(values) - 1, min(len(values), SAMPLE_ROWS)).astype(np.int64)
        )
        sampled = values[picks] if rows is None else rows.take(picks)
        digest.update(np.ascontiguousarray(sampled).tobytes())
    return digest.hexdigest()


#: Makes an array for a search's intermediate values: ``(key, shape, dtype)``.
ArrayMaker = Callable[[Hashable, tuple[int, ...], Any], np.ndarray]
#: The largest array a :class:`Scratch` keeps; larger ones are made afresh each time.
SCRATCH_BYTES = 64 * 2**20


def fresh_array(key: Hashable, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A new array (``key`` unused): the :data:`ArrayMaker` of a search that keeps nothing."""
    return np.empty(shape, dtype)


class Scratch:
    """Arrays kept from one search to the next, by key: a compressed index reads and widens its candidates' rows for
    every query, and new arrays of that size cost page faults (a fifth of the search's time at 1M words). One search
    at a time borrows them; another at the same time gets new arrays."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrays: dict[Hashable, np.ndarray] = {}

    @contextmanager
    def borrowed(self) -> Iterator[ArrayMaker]:
        """The :data:`ArrayMaker` of this search: the kept arrays, or :func:`fresh_array` when they are in use."""
        if not self._lock.acquire(blocking=False):
            yield fresh_array
            return
        try:
            yield self._array
        finally:
            self._lock.release()

    def _array(self, key: Hashable, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dtype, size = np.dtype(dtype), int(np.prod(shape, dtype=np.int64))
        if size * dtype.itemsize > SCRATCH_BYTES:
            return np.empty(shape, dtype)
        kept = self._arrays.get(key)
        if kept is None or kept.dtype != dtype or kept.size < size:
            kept = self._arrays[key] = np.empty(size, dtype)
        return kept[:size].reshape(shape)


class FileRows:
    """Rows of a C-order ``.npy`` array read with ``os.pread`` through a descriptor of its own: pages read this way
    stay out of the process's resident memory, where a memory map keeps every page it touched (and its neighbours)."""

    def __init__(self, descriptor: int, offset: int, shape: tuple[int, ...], dtype: np.dtype):
        self.descriptor = os.dup(descriptor)
        weakref.finalize(self, os.close, self.descriptor)
        self.offset, self.shape, self.dtype = offset, tuple(shape), np.dtype(dtype)
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def runs(
        self, starts: np.ndarray, ends: np.ndarray, array: ArrayMaker = fresh_array
    ) -> np.ndarray:
        """Rows ``starts[i]:ends[i]`` of every run ``i``, end to end, in an array from ``array``."""
        starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        if len(starts) and (
            starts.min() < 0 or ends.max() > self.shape[0] or (ends < starts).any()
        ):
            raise IndexError(f"rows out of range for {self.shape[0]} rows")
        out = array("rows", (int((ends - starts).sum()), *self.shape[1:]), self.dtype)
        view, at = memoryview(out.reshape(-1).view(np.uint8).data), 0
        for start, end in zip(starts.tolist(), ends.tolist()):
            size = (end - start) * self.row_bytes
            _read_into(self.descriptor, view[at : at + size], self.offset + start * self.row_bytes)
            at += size
        return out

    def take(self, rows: np.ndarray, array: ArrayMaker = fresh_array) -> np.ndarray:
        """Rows ``rows`` (indices, in that order), each run of consecutive rows read at once."""
        rows = np.asarray(rows, np.int64).reshape(-1)
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = rows[np.concatenate([[0], breaks])] if len(rows) else rows
        ends = rows[np.concatenate([breaks - 1, [len(rows) - 1]])] + 1 if len(rows) else rows
        return self.runs(starts, ends, array)


def _read_into(descriptor: int, view: memoryview, offset: int) -> None:
    while len(view):
        if hasattr(os, "preadv"):
            count = os.preadv(descriptor, [view], offset)
        else:  # pragma: no cover - systems without preadv
            block = os.pread(descriptor, len(view), offset)
            count = len(block)
            view[:count] = block
        if not count:
            raise ValueError("the array file is shorter than its header says")
        view, offset = view[count:], offset + count


def is_plain_name(name: Any) -> bool:
    """Whether ``name`` is a plain, non-hidden file or folder name (no separator, not ``.``/``..``).

    >>> [is_plain_name(name) for name in ("part-00000-0000", "a.npy", "..", ".", "../x", "/etc/passwd", "a/b", "")]
    [True, True, False, False, False, False, False, False]
    """
    return isinstance(name, str) and re.fullmatch(r"[\w-][\w.-]*", name) is not None


def read_bytes(path: str, size: int | None = None, *, folder: int | None = None) -> bytes:
    """The bytes of a regular file, opened without following a link (a link, or another size: FileAccessError)."""
    with open_regular_file(path, size, folder=folder) as handle:
        return handle.read()


def load_array(path: str, size: int | None = None, *, folder: int | None = None) -> np.ndarray:
    """An ``.npy`` array (no pickles), opened once without following a link."""
    with open_regular_file(path, size, folder=folder) as handle:
        return np.load(handle, allow_pickle=False)


def map_array(
    path: str, size: int | None = None, *, folder: int | None = None
) -> tuple[np.memmap, FileRows | None]:
    """An ``.npy`` array memory-mapped (opened once without following a link), and its :class:`FileRows` on the same
    file (``None`` where the system has no ``pread`` or the array is in Fortran order)."""
    with open_regular_file(path, size, folder=folder) as handle:
        headers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
        version = npy.read_magic(handle)
        if version not in headers:
            raise ValueError(
                f"{os.path.basename(path)}: .npy format {version} cannot be memory-mapped"
            )
        shape, fortran_order, dtype = headers[version](handle)
        if dtype.hasobject:
            raise ValueError(f"{os.path.basename(path)} holds Python objects (never loaded)")
        offset = handle.tell()  # np.memmap moves the file's position
        order: Literal["C", "F"] = "F" if fortran_order else "C"
        values = np.memmap(handle, dtype=dtype, mode="r", shape=shape, order=order, offset=offset)
        readable = hasattr(os, "pread") and not fortran_order and len(shape) >= 1
        rows = FileRows(handle.fileno(), offset, shape, dtype) if readable else None
        return values, rows


class DataFolder:
    """A manifest's data folder, opened once without following a link; its files read by name, checked against the
    manifest (type and size; SHA-256 of the small files, of every file with ``verify``; arrays' samples)."""

    def __init__(self, data_dir: str, manifest: dict[str, Any], folder: int | None) -> None:
        self.data_dir, self.folder = data_dir, folder
        self.files, self.samples = manifest["files"], manifest["samples"]
        self.rows: dict[str, FileRows] = {}

    @classmethod
    @contextmanager
    def open(cls, path: str, manifest: dict[str, Any], verify: bool) -> Iterator[DataFolder]:
        data_dir = os.path.join(path, manifest["data"])
        if os.path.islink(data_dir):
            raise IndexFileError(
                f"{path}: the data folder {manifest['data']} is a symbolic link (nothing outside the index folder is "
                f"read)."
            )
        # Opened once: a link swapped in for the folder (or a file) after these checks is refused, never read.
        with open_folder(data_dir) as folder:
            data = cls(data_dir, manifest, folder)
            for name, expected in data.files.items():
                # the entry itself: a link is refused, never followed
                found = os.lstat(os.path.join(data_dir, name))
                if not stat.S_ISREG(found.st_mode):
                    raise ValueError(f"{name} is not a regular file")
                if found.st_size != expected["bytes"]:
                    raise ValueError(
                        f"{name} has {found.st_size} bytes, the manifest says {expected['bytes']}"
                    )
                digest = verify and file_digest(data.entry(name), expected["bytes"], folder=folder)
                if digest and digest != expected["sha256"]:
                    raise ValueError(f"{name} does not match its checksum")
            yield data

    def entry(self, name: str) -> str:
        """``name`` as the readers open it: the bare name inside the open folder, else its path."""
        return name if self.folder is not None else os.path.join(self.data_dir, name)

    def bytes(self, name: str) -> bytes:
        """The file's bytes, checked against its SHA-256."""
        data = read_bytes(self.entry(name), self.files[name]["bytes"], folder=self.folder)
        if hashlib.sha256(data).hexdigest() != self.files[name]["sha256"]:
            raise ValueError(f"{name} does not match its checksum")
        return data

    def json(self, name: str) -> Any:
        return json.loads(self.bytes(name).decode("utf-8"))

    def array(self, name: str, mmap: bool) -> np.ndarray:
        """The array ``name.npy``, checked against its sample checksum (memory-mapped: the sample read from the file,
        not through the map, and the array's :class:`FileRows` kept in ``rows[name]``)."""
        path, size = self.entry(f"{name}.npy"), self.files[f"{name}.npy"]["bytes"]
        values: np.ndarray
        if mmap:
            values, rows = map_array(path, size, folder=self.folder)
        else:
            values, rows = load_array(path, size, folder=self.folder), None
        if array_digest(values, rows) != self.samples[name]:
            raise ValueError(
                f"{name}.npy does not match its checksum (changed, shuffled or swapped)"
            )
        if rows is not None:
            self.rows[name] = rows
        return values


def _json_object(path: str, file_path: str, what: str, short: str) -> dict[str, Any]:
    """The JSON object in ``file_path`` (never read through a link); else a clear error naming ``what``."""
    try:
        value = json.loads(read_bytes(file_path).decode("utf-8"))
    except FileAccessError as error:  # a link or not a regular file: refused, never followed
        raise IndexFileError(f"{path}: unreadable {short} ({error})") from None
    except OSError as error:
        raise FileAccessError(f"{path}: cannot read {what} ({error.strerror or error}).") from None
    except ValueError as error:
        raise IndexFileError(f"{path}: unreadable {short} ({error}).") from None
    except RecursionError:  # e.g. 100,000 nested "[": deeper than any index writes
        raise IndexFileError(f"{path}: unreadable {short} (JSON nested too deeply).") from None
    if not isinstance(value, dict):
        raise IndexFileError(
            f"{path}: unreadable {short} (a JSON {type(value).__name__}, not an object)."
        )
    return value


def read_manifest(path: str, must_exist: bool) -> dict[str, Any] | None:
    """The manifest of the index at ``path``, checked to hold every field a load needs (else IndexFileError); without
    one, ``None`` unless ``must_exist`` (then FileNotFoundError for a missing folder, else IndexFileError)."""
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.lexists(manifest_path):  # a link is there, and refused unread by _json_object
        if must_exist:
            if not os.path.isdir(path):
                raise FileNotFoundError(f"No index at {path!r}.")
            raise IndexFileError(
                f"{path} is not a SpanIndex (no {MANIFEST}; a save may have been interrupted)."
            )
        return None
    manifest = _json_object(path, manifest_path, "the index manifest", "index manifest")
    # `true` equals 1 in Python: never read as a format
    if type(manifest.get("format_version")) is not int:
        raise SpanInputError(
            f"{path}: index format {manifest.get('format_version')!r} is not supported."
        )
    if manifest.get("format_version") == 1:
        raise IndexFileError(
            f"{path} was built by an older slice-st (index format 1, whose model fingerprint sampled the "
            "weights): rebuild it (slice-st index build ... --force, or SpanIndex.build and save)."
        )
    _check_format(path, manifest)
    unreadable = f"{path}: unreadable index manifest"
    for key, kind in _REQUIRED.items():
        value = manifest.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            raise IndexFileError(f"{unreadable} ({key!r} is missing or not a {kind.__name__}).")
    if manifest["generation"] > MAX_GENERATION:
        raise IndexFileError(
            f"{unreadable} (generation {str(manifest['generation'])[:20]}… is past {MAX_GENERATION}; no index is "
            "saved that often)."
        )
    # a folder inside the index, never a path elsewhere
    if not re.fullmatch(r"data-[\w.-]+", manifest["data"]):
        raise IndexFileError(
            f"{unreadable} (data folder {manifest['data']!r} is not a data folder name)."
        )
    if manifest["dtype"] not in ("float32", "float16"):
        raise IndexFileError(f"{unreadable} (dtype {manifest['dtype']!r}).")
    # plain names inside the data folder, each with its size and checksum
    for name, entry in manifest["files"].items():
        entry = entry if isinstance(entry, dict) else {}
        size, digest = entry.get("bytes"), str(entry.get("sha256", ""))
        if (
            not is_plain_name(name)
            or type(size) is not int
            or size < 0
            or not re.fullmatch("[0-9a-f]{64}", digest)
        ):
            raise IndexFileError(
                f"{unreadable} (files entry {name!r} is not a file name in the data folder with its bytes and sha256)."
            )
    arrays = stored_arrays(manifest)
    required = [*(f"{name}.npy" for name in arrays), *_OTHER_FILES]
    missing = [name for name in required if name not in manifest["files"]]
    if missing:
        raise IndexFileError(f"{unreadable} (files lacks {', '.join(missing)}).")
    if not all(isinstance(manifest["samples"].get(name), str) for name in arrays):
        raise IndexFileError(
            f"{unreadable} (samples must hold a checksum of each of {', '.join(arrays)})."
        )
    try:
        settings = manifest["span_config"]
        SpanConfig(**{key: settings[key] for key in ("min_span", "max_span", "unit")})
    except (KeyError, TypeError, ValueError) as error:
        raise IndexFileError(f"{unreadable} (span_config: {error}).") from None
    return manifest


def _check_format(path: str, manifest: dict[str, Any]) -> None:
    """Refuse a format this reader does not know, or a format that contradicts the manifest's tiers."""
    version = manifest.get("format_version")
    known = (INDEX_FORMAT_VERSION, COMPRESSED_FORMAT_VERSION, NO_EXACT_TIER_FORMAT_VERSION)
    if version not in known:
        raise IndexFileError(
            f"{path}: index format {version!r} is not supported (expected {INDEX_FORMAT_VERSION}, "
            f"{COMPRESSED_FORMAT_VERSION} for a compressed index, or {NO_EXACT_TIER_FORMAT_VERSION} for one without "
            "its exact tier): rebuild it with this slice-st, or upgrade slice-st."
        )
    compressed = version in (COMPRESSED_FORMAT_VERSION, NO_EXACT_TIER_FORMAT_VERSION)
    without_exact = version == NO_EXACT_TIER_FORMAT_VERSION
    if compressed != isinstance(manifest.get("compression"), dict) or without_exact != (
        manifest.get("exact_tier", True) is False
    ):
        raise SpanInputError(
            f"{path}: unreadable index manifest (format {version} with compression "
            f"{manifest.get('compression')!r:.60} and exact_tier {manifest.get('exact_tier', True)!r:.20})."
        )


def without_exact_tier(arrays: dict[str, Any]) -> dict[str, Any]:
    """``arrays`` less the exact tier's (:data:`EXACT_TIER_ARRAYS`)."""
    return {name: values for name, values in arrays.items() if name not in EXACT_TIER_ARRAYS}


def stored_arrays(manifest: dict[str, Any]) -> tuple[str, ...]:
    """The arrays (:data:`ARRAYS`) the data folder of ``manifest`` holds: all but the exact tier's without it."""
    if manifest.get("exact_tier", True) is False:
        return tuple(name for name in ARRAYS if name not in EXACT_TIER_ARRAYS)
    return ARRAYS


def read_consistent(path: str, manifest: dict[str, Any], read: Callable[[dict[str, Any]], Any]):
    """``(read(manifest), manifest)``, retried with the new manifest while a concurrent save replaces the data under
    it; if the manifest on disk still names the same folder, the data really is broken and the error stands."""
    for _ in range(READ_RETRIES):
        try:
            return read(manifest), manifest
        except (OSError, ValueError, RuntimeError) as error:  # faiss: a bad file is a RuntimeError
            latest = read_manifest(path, must_exist=True) or {}
            if all(latest.get(key) == manifest.get(key) for key in ("data", "generation")):
                if isinstance(error, SpanInputError):
                    raise
                raise IndexFileError(
                    f"{path}: the index data is missing or corrupt ({error})."
                ) from None
            manifest = latest
    raise IndexFileError(
        f"{path}: the index changed {READ_RETRIES} times while being read; try again."
    )


def read_shard_list(path: str) -> dict[str, Any] | None:
    """The :data:`SHARD_LIST` of a sharded index folder (``None`` if it has none); unreadable: IndexFileError."""
    list_path = os.path.join(path, SHARD_LIST)
    # a link is refused unread by _json_object
    if not (os.path.islink(list_path) or os.path.isfile(list_path)):
        return None
    shard_list = _json_object(path, list_path, SHARD_LIST, SHARD_LIST)
    shards = shard_list.get("shards", [])
    if not isinstance(shards, list):
        raise IndexFileError(
            f"{path}: unreadable {SHARD_LIST} (not an object with a list of shards)."
        )
    bad = [name for name in shards if not is_plain_name(name)]
    if bad:
        raise IndexFileError(
            f"{path}: unreadable {SHARD_LIST} (shard {bad[0]!r} is not a folder name inside the index folder)."
        )
    refuse_linked_shards(path, shards, f"unreadable {SHARD_LIST}")
    return shard_list


def refuse_linked_shards(path: str, names: Sequence[str], what: str) -> None:
    """Refuse (IndexFileError beginning ``path: what``) shards of ``path`` that are symbolic links, never followed."""
    for name in names:
        if os.path.islink(os.path.join(path, name)):
            raise IndexFileError(
                f"{path}: {what} (shard {name!r} is a symbolic link, not a folder inside the index folder; "
                "nothing outside it is read: name the index it points to instead)."
            )


def shard_directories(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Index folders named by ``paths``: each an index, a complete sharded build's folder (its shards), or a folder
    of indexes (every non-hidden sub-folder, each an index and none a link: a crashed shard is never skipped)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    directories: list[str] = []
    for path in map(os.fspath, paths):
        if os.path.exists(os.path.join(path, MANIFEST)):
            directories.append(path)
        elif (shard_list := read_shard_list(path)) is not None:
            # built on Ray: its shards, once complete
            if not shard_list.get("complete"):
                raise IndexFileError(
                    f"{path}: its sharded build has not finished ({SHARD_LIST} is not complete); "
                    "run the same build again to resume it."
                )
            if not shard_list.get("shards"):  # each a plain name (read_shard_list)
                raise IndexFileError(
                    f"{path}: unreadable {SHARD_LIST} (no shards, or a shard name that is not a folder name)."
                )
            directories.extend(os.path.join(path, name) for name in shard_list["shards"])
        elif os.path.isdir(path):
            directories.extend(_folder_of_indexes(path))
        else:
            raise FileNotFoundError(f"No index at {path!r}.")
    if not directories:
        raise SpanInputError("No index directories given.")
    return directories


def _folder_of_indexes(path: str) -> list[str]:
    entries = sorted(
        (e for e in os.scandir(path) if not e.name.startswith(".")), key=lambda e: e.name
    )
    if any(_DATA_NAME.fullmatch(e.name) and e.is_dir() for e in entries):
        raise IndexFileError(
            f"{path} is not a SpanIndex (no {MANIFEST}; a save may have been interrupted)."
        )
    refuse_linked_shards(
        path, [e.name for e in entries if e.is_dir()], "a directory of indexes holds a link"
    )
    inside = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    if not inside:
        raise IndexFileError(
            f"{path} is neither an index (no {MANIFEST}) nor a directory of indexes."
        )
    broken = [p for p in inside if not os.path.exists(os.path.join(p, MANIFEST))]
    if broken:
        raise IndexFileError(
            f"{path} holds {len(broken)} folder(s) that are not indexes: {', '.join(broken[:3])}"
            f"{'…' if len(broken) > 3 else ''} (no {MANIFEST}: a shard build that did not finish?). "
            "Finish or remove them, or name the shards to search."
        )
    return inside
