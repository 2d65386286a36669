"""An index on disk: the manifest, atomic writes (fsync, then one ``os.replace``), the writer lock, shard directories.

A directory holds ``manifest.json``, which names a data folder ``data-<generation>-<random>/`` of
``.npy`` arrays and a few files. A save writes a new data folder, fsyncs it, then replaces the
manifest atomically and fsyncs the directory, so a crash never leaves a half index that loads.

* **Writers** hold ``DIR/.lock`` (``filelock``: an ``flock``, released if the process dies). A plain
  save holds it while it writes; :meth:`SpanIndex.open_for_update` holds it from load to commit, so two
  ``add``s at once both land. A save of an index loaded from the same directory checks that the
  manifest is still the one it was loaded from (optimistic check): if another process saved in
  between, :class:`IndexConflictError` instead of overwriting its work.
* **Readers** take no lock (a read-only index loads). A save removes the previous data folder, so a
  reader that read the old manifest may find its folder gone: it reads the manifest again and
  retries with the new one (:func:`read_consistent`); readers see the old or the new index.
* **Only what the index wrote is deleted**: data folders carrying the index's marker file, or the one
  the replaced manifest named. Other files and folders in the directory (``data-raw/``…) are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from slice_st.config import SpanConfig
from slice_st.encode import SpanInputError
from slice_st.text import FileAccessError, check_creatable

__all__ = ["INDEX_FORMAT_VERSION", "MANIFEST", "ARRAYS", "LOCK_FILE", "DATA_MARKER", "IndexBusyError", "IndexConflictError",
           "index_lock", "check_index_target", "write_bytes", "save_array", "file_digest", "array_digest", "fsync_directory",
           "new_data_directory", "remove_old_data", "read_manifest", "read_consistent", "shard_directories", "SHARD_LIST",
           "write_json", "read_shard_list"]

INDEX_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARRAYS = ("unit_vectors", "unit_chars", "span_norms", "segment_units", "segment_docs", "segment_first_unit", "text_offsets")
LOCK_FILE = ".lock"
#: The manifest of a sharded index built by :func:`slice_st.index.ray_engine.build_on_ray`: its plan, and its shards once complete.
SHARD_LIST = "shards.json"
#: A file inside every data folder a save creates: only folders carrying it (or named by the replaced manifest) are removed.
DATA_MARKER = ".slice-st-data"
_DATA_NAME = re.compile(r"data-\d+-[0-9A-Za-z_]+")
#: Rows (elements) of each array hashed into the manifest's ``samples``, checked on every load.
SAMPLE_ROWS = 4096
#: How often a reader re-reads the manifest when the data it names vanished under it (a save replaced it).
READ_RETRIES = 20


class IndexBusyError(SpanInputError):
    """Another process holds the index directory's writer lock (it is saving or updating the index)."""


class IndexConflictError(SpanInputError):
    """The index directory was saved by someone else after this index was loaded from it: saving would lose that."""


# ---------------------------------------------------------------------------------------------- writer lock
_held = threading.local()


def check_index_target(path: str | os.PathLike) -> str:
    """Check, before any work, that an index can be written at ``path`` (creating nothing); returns the path.

    ``path`` must be a writable folder, or not exist under a writable folder. Else :class:`FileAccessError`.

    Args:
        path: The index folder to write.

    Returns:
        The path, checked.
    """
    path = os.fspath(path)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise FileAccessError(f"{path} is a file, not an index folder.")
        if not os.access(path, os.W_OK | os.X_OK):
            raise FileAccessError(f"{path} is not writable (permission denied): the index cannot be changed there.")
        return path
    check_creatable(path)
    return path


def _holder(lock_path: str) -> str:
    try:
        with open(lock_path, encoding="utf-8") as handle:
            return handle.read().strip() or "another process"
    except (OSError, ValueError):
        return "another process"


@contextmanager
def index_lock(path: str | os.PathLike, timeout: float | None = 0, on_wait: Callable[[str], None] | None = None):
    """Hold ``path/.lock``, the index directory's writer lock (the folder is created if needed).

    ``timeout``: 0 fails at once if another process holds it, ``None`` waits as long as it takes
    (``on_wait(holder)`` is called once before waiting), a number waits that many seconds. Failing:
    :class:`IndexBusyError`. Re-entrant within a thread (``open_for_update`` then ``save``). A
    directory that cannot be written gives :class:`FileAccessError` before anything is written.

    Args:
        path: The index folder.
        timeout: 0: fail at once; ``None``: wait; a number: wait that many seconds.
        on_wait: Called once with the holder before waiting.
    """
    from filelock import FileLock, Timeout

    path = os.fspath(path)
    key = os.path.realpath(path)
    held = _held.__dict__.setdefault("paths", set())
    if key in held:
        yield
        return
    check_index_target(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise FileAccessError(f"cannot create the index folder {path}: {error.strerror or error}.") from None
    lock_path = os.path.join(path, LOCK_FILE)
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
        raise FileAccessError(f"cannot lock the index folder {path} ({lock_path}): {error.strerror or error}.") from None
    try:
        try:
            with open(lock_path, "w", encoding="utf-8") as handle:  # another descriptor: closing it keeps the flock
                handle.write(f"pid {os.getpid()}")
        except OSError:
            pass
        held.add(key)
        yield
    finally:
        held.discard(key)
        lock.release()


# ---------------------------------------------------------------------------------------------- writing
def write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def save_array(path: str, values: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.save(handle, values)
        handle.flush()
        os.fsync(handle.fileno())


def write_json(path: str, value: Any) -> None:
    """Write a JSON file atomically (a temporary file, fsync, ``os.replace``, fsync of the folder)."""
    folder = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(4)}.tmp")
    try:
        write_bytes(temporary, json.dumps(value, indent=1, ensure_ascii=False).encode())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    fsync_directory(folder)


def fsync_directory(path: str) -> None:
    """Make a rename or a new entry in ``path`` durable (no-op where directories cannot be opened)."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(handle)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(handle)


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def array_digest(values: np.ndarray) -> str:
    """SHA-256 of an array's shape, dtype and up to :data:`SAMPLE_ROWS` evenly spread rows (all of a small array).

    Cheap enough to check on every load of a memory-mapped array; a shuffled, truncated or swapped
    array fails it.

    >>> array_digest(np.arange(6).reshape(3, 2)) == array_digest(np.arange(6).reshape(3, 2)[[0, 2, 1]])
    False
    """
    values = np.asarray(values)
    digest = hashlib.sha256(f"{values.shape}|{values.dtype.str}".encode())
    if len(values):
        rows = np.unique(np.linspace(0, len(values) - 1, min(len(values), SAMPLE_ROWS)).astype(np.int64))
        digest.update(np.ascontiguousarray(values[rows]).tobytes())
    return digest.hexdigest()


def new_data_directory(path: str, generation: int) -> str:
    """Create ``path/data-<generation>-<random>/`` (normal permissions, as ``mkdir`` with the umask) with the marker."""
    while True:
        data_dir = os.path.join(path, f"data-{generation:06d}-{secrets.token_hex(4)}")
        try:
            os.mkdir(data_dir)
            break
        except FileExistsError:  # pragma: no cover - 2^32 names
            continue
    write_bytes(os.path.join(data_dir, DATA_MARKER), b"written by slice_st.SpanIndex.save; removed with its index version\n")
    return data_dir


def remove_old_data(path: str, keep: str, replaced: str | None) -> None:
    """Remove the data folders this index wrote, except ``keep`` (the current one); nothing else is touched.

    A folder is the index's own if it carries :data:`DATA_MARKER` (every save since the marker was
    introduced, including the leftovers of crashed saves) or is ``replaced``, the folder named by the
    manifest this save replaced. Runs under the writer lock, so no save in progress is touched.
    """
    for entry in os.scandir(path):
        if entry.name == keep or not entry.is_dir(follow_symlinks=False) or not _DATA_NAME.fullmatch(entry.name):
            continue
        if entry.name == replaced or os.path.isfile(os.path.join(entry.path, DATA_MARKER)):
            shutil.rmtree(entry.path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- reading
_REQUIRED = {"data": str, "model_fingerprint": str, "span_config": dict, "dtype": str, "units": int, "documents": int}


def _json_object(path: str, file_path: str, what: str, short: str) -> dict[str, Any]:
    """The JSON object in ``file_path`` (a file of the index at ``path``); else a clear error naming ``what``."""
    try:
        with open(file_path, encoding="utf-8") as handle:
            value = json.load(handle)
    except OSError as error:
        raise FileAccessError(f"{path}: cannot read {what} ({error.strerror or error}).") from None
    except ValueError as error:
        raise SpanInputError(f"{path}: unreadable {short} ({error}).") from None
    if not isinstance(value, dict):
        raise SpanInputError(f"{path}: unreadable {short} (a JSON {type(value).__name__}, not an object).")
    return value


def read_manifest(path: str, must_exist: bool) -> dict[str, Any] | None:
    """The manifest of the index at ``path``, checked: a JSON object with every field a load needs.

    ``None`` when there is none and ``must_exist`` is false; otherwise ``FileNotFoundError`` (no folder)
    or :class:`SpanInputError` saying what is wrong.

    Args:
        path: The index folder.
        must_exist: Raise when there is no manifest (else return ``None``).

    Returns:
        The manifest as a dict, or ``None``.
    """
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.exists(manifest_path):
        if must_exist:
            if not os.path.isdir(path):
                raise FileNotFoundError(f"No index at {path!r}.")
            raise SpanInputError(f"{path} is not a SpanIndex (no {MANIFEST}; a save may have been interrupted).")
        return None
    manifest = _json_object(path, manifest_path, "the index manifest", "index manifest")
    if manifest.get("format_version") != INDEX_FORMAT_VERSION:
        raise SpanInputError(f"{path}: index format {manifest.get('format_version')!r} is not supported (expected {INDEX_FORMAT_VERSION}).")
    for key, kind in _REQUIRED.items():
        value = manifest.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            raise SpanInputError(f"{path}: unreadable index manifest ({key!r} is missing or not a {kind.__name__}).")
    if not re.fullmatch(r"data-[\w.-]+", manifest["data"]):  # a folder inside the index, never a path elsewhere
        raise SpanInputError(f"{path}: unreadable index manifest (data folder {manifest['data']!r} is not a data folder name).")
    if manifest["dtype"] not in ("float32", "float16"):
        raise SpanInputError(f"{path}: unreadable index manifest (dtype {manifest['dtype']!r}).")
    try:
        settings = manifest["span_config"]
        SpanConfig(**{key: settings[key] for key in ("min_span", "max_span", "unit")})
    except (KeyError, TypeError, ValueError) as error:
        raise SpanInputError(f"{path}: unreadable index manifest (span_config: {error}).") from None
    return manifest


def read_consistent(path: str, manifest: dict[str, Any], read: Callable[[dict[str, Any]], Any]):
    """``read(manifest)``, retried with the new manifest while a concurrent save replaces the data under it.

    ``read`` raises ``OSError``/``ValueError`` when the data folder is missing or does not match.
    If the manifest on disk still names the same folder, the data really is broken: the error stands.
    """
    for _ in range(READ_RETRIES):
        try:
            return read(manifest), manifest
        except (OSError, ValueError, RuntimeError) as error:  # faiss reports a bad file as RuntimeError
            latest = read_manifest(path, must_exist=True)
            if (latest["data"], latest.get("generation")) == (manifest["data"], manifest.get("generation")):
                if isinstance(error, SpanInputError):
                    raise
                raise SpanInputError(f"{path}: the index data is missing or corrupt ({error}).") from None
            manifest = latest
    raise SpanInputError(f"{path}: the index changed {READ_RETRIES} times while being read; try again.")


def read_shard_list(path: str) -> dict[str, Any] | None:
    """The :data:`SHARD_LIST` of a sharded index directory (``None`` if it has none); unreadable: :class:`SpanInputError`."""
    list_path = os.path.join(path, SHARD_LIST)
    if not os.path.isfile(list_path):
        return None
    shard_list = _json_object(path, list_path, SHARD_LIST, SHARD_LIST)
    if not isinstance(shard_list.get("shards", []), list):
        raise SpanInputError(f"{path}: unreadable {SHARD_LIST} (not an object with a list of shards).")
    return shard_list


def shard_directories(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Index directories named by ``paths``: each path is an index, or a directory of indexes (its sub-directories).

    In a directory of indexes every (non-hidden) sub-directory must be an index: one without a
    manifest (a shard whose build crashed) is an error, never skipped silently. A directory with a
    :data:`SHARD_LIST` (built on Ray) stands for the shards it lists, once its build is complete.

    Args:
        paths: An index folder, a sharded build's folder, or a list of them.

    Returns:
        The shard folders, in order.

    Example:
        >>> shard_directories([])
        Traceback (most recent call last):
        ...
        slice_st.encode.SpanInputError: No index directories given.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    directories: list[str] = []
    for path in map(os.fspath, paths):
        shard_list = None if os.path.exists(os.path.join(path, MANIFEST)) else read_shard_list(path)
        if os.path.exists(os.path.join(path, MANIFEST)):
            directories.append(path)
        elif shard_list is not None:  # built on Ray: its shards, in order, once the build is complete
            if not shard_list.get("complete"):
                raise SpanInputError(f"{path}: its sharded build has not finished ({SHARD_LIST} is not complete); "
                                     "run the same build again to resume it.")
            names = [name for name in shard_list["shards"] if isinstance(name, str) and re.fullmatch(r"[\w.-]+", name)]
            if not names or len(names) != len(shard_list["shards"]):
                raise SpanInputError(f"{path}: unreadable {SHARD_LIST} (no shards, or a shard name that is not a folder name).")
            directories.extend(os.path.join(path, name) for name in names)
        elif os.path.isdir(path):
            entries = sorted((e for e in os.scandir(path) if not e.name.startswith(".")), key=lambda e: e.name)
            if any(_DATA_NAME.fullmatch(e.name) and e.is_dir() for e in entries):
                raise SpanInputError(f"{path} is not a SpanIndex (no {MANIFEST}; a save may have been interrupted).")
            inside = [e.path for e in entries if e.is_dir()]
            if not inside:
                raise SpanInputError(f"{path} is neither an index (no {MANIFEST}) nor a directory of indexes.")
            broken = [p for p in inside if not os.path.exists(os.path.join(p, MANIFEST))]
            if broken:
                raise SpanInputError(
                    f"{path} holds {len(broken)} folder(s) that are not indexes: {', '.join(broken[:3])}"
                    f"{'…' if len(broken) > 3 else ''} (no {MANIFEST}: a shard build that did not finish?). "
                    "Finish or remove them, or name the shards to search."
                )
            directories.extend(inside)
        else:
            raise FileNotFoundError(f"No index at {path!r}.")
    if not directories:
        raise SpanInputError("No index directories given.")
    return directories
