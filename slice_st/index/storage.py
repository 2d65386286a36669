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
from slice_st.errors import FileAccessError, IndexBusyError, SpanInputError
from slice_st.text import atomic_file, check_creatable, create_new_file, open_regular_file

#: 2: the model fingerprint covers every weight (:func:`slice_st.loading.model_fingerprint`), and the data folder
#: records its settings (:data:`SETTINGS_FILE`). A format-1 index must be rebuilt.
INDEX_FORMAT_VERSION = 2
MANIFEST = "manifest.json"
#: In every data folder: the span settings, dtype and model fingerprint the arrays were written with (checked on load).
SETTINGS_FILE = "settings.json"
ARRAYS = (
    "unit_vectors",
    "unit_chars",
    "span_norms",
    "segment_units",
    "segment_docs",
    "segment_first_unit",
    "text_offsets",
)
LOCK_FILE = ".lock"
#: The manifest of a sharded index built by :func:`slice_st.index.ray_engine.build_on_ray`: its plan, and its shards
#: once complete.
SHARD_LIST = "shards.json"
#: A file inside every data folder a save creates: only folders carrying it (or named by the replaced manifest) are
#: removed.
DATA_MARKER = ".slice-st-data"
_DATA_NAME = re.compile(r"data-\d+-[0-9A-Za-z_]+")
#: Rows (elements) of each array hashed into the manifest's ``samples``, checked on every load.
SAMPLE_ROWS = 4096
#: How often a reader re-reads the manifest when the data it names vanished under it (a save replaced it).
READ_RETRIES = 20


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
    created = not os.path.lexists(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise FileAccessError(f"cannot create the index folder {path}: {error.strerror or error}.") from None
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
        try:
            descriptor = os.open(lock_path, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(
                descriptor, "w", encoding="utf-8"
            ) as handle:  # another descriptor: closing it keeps the flock
                handle.write(f"pid {os.getpid()}")
        except OSError:
            pass
        held.add(key)
        yield
        failed = False
    finally:
        held.discard(key)
        lock.release()
        if failed and created:  # a first save that failed (e.g. a full disk): no empty index folder left behind
            _remove_empty_index_folder(path, lock_path)


def _remove_empty_index_folder(path: str, lock_path: str) -> None:
    """Remove a folder this lock created if it holds nothing but the lock file."""
    try:
        if os.listdir(path) == [LOCK_FILE] and not os.path.islink(lock_path):
            os.unlink(lock_path)
            os.rmdir(path)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------- writing
def write_bytes(path: str, data: bytes) -> None:
    """Write a new file (in a fresh data folder) and fsync it; an existing file or link there is ``FileExistsError``."""
    with create_new_file(path) as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def save_array(path: str, values: np.ndarray) -> None:
    """:func:`numpy.save` to a new file, fsynced (as :func:`write_bytes`)."""
    with create_new_file(path) as handle:
        np.save(handle, values)
        handle.flush()
        os.fsync(handle.fileno())


def write_json(path: str, value: Any, indent: int = 1) -> None:
    """Write a JSON file atomically (a new temporary file, fsync, ``os.replace``, fsync of the folder).

    The temporary file is created ``O_EXCL|O_NOFOLLOW`` under a random name (:func:`slice_st.text.atomic_file`):
    nothing is written through a link planted in the folder, and a link at ``path`` is replaced, not followed.
    """
    with atomic_file(path) as handle:
        handle.write(json.dumps(value, indent=indent, ensure_ascii=False).encode())
    fsync_directory(os.path.dirname(os.path.abspath(path)))


def write_manifest(path: str, manifest: dict[str, Any]) -> None:
    """Replace ``path/manifest.json`` atomically (the commit point of a save)."""
    write_json(os.path.join(path, MANIFEST), manifest, indent=2)


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


def file_digest(path: str, size: int | None = None, *, folder: int | None = None) -> str:
    """SHA-256 of a regular file's bytes (a link, a device or a pipe is a ``ValueError``, never read).

    With ``size``, at most ``size + 1`` bytes are read (a longer file cannot match), so a file that grew,
    or is endless, is never read whole.
    """
    with open_regular_file(path, folder=folder) as handle:  # FileAccessError (an OSError): a link, a device, a pipe
        digest = hashlib.sha256()
        left = None if size is None else size + 1
        while left is None or left > 0:
            block = handle.read(1 << 20 if left is None else min(1 << 20, left))
            if not block:
                break
            digest.update(block)
            if left is not None:
                left -= len(block)
    return digest.hexdigest()


def is_plain_name(name: Any) -> bool:
    """Whether ``name`` is a plain file or folder name inside a folder: no separator, not ``.``/``..``, not hidden, not
    absolute.

    >>> [is_plain_name(name) for name in ("part-00000-0000", "unit_vectors.npy", "..", ".", "../x", "/etc/passwd",
    ...     "a/b", "")]
    [True, True, False, False, False, False, False, False]
    """
    return isinstance(name, str) and re.fullmatch(r"[\w-][\w.-]*", name) is not None


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
    """Create ``path/data-<generation>-<random>/`` (normal permissions, as ``mkdir`` with the umask) with the marker.

    If the marker cannot be written (a full disk), the new folder is removed before the error is raised.
    """
    while True:
        data_dir = os.path.join(path, f"data-{generation:06d}-{secrets.token_hex(4)}")
        try:
            os.mkdir(data_dir)
            break
        except FileExistsError:  # pragma: no cover - 2^32 names
            continue
    try:
        write_bytes(
            os.path.join(data_dir, DATA_MARKER), b"written by slice_st.SpanIndex.save; removed with its index version\n"
        )
    except BaseException:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
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
#: The largest ``generation`` a manifest may hold (one save a second for 30,000 years).
MAX_GENERATION = 10**12
_REQUIRED = {
    "data": str,
    "model_fingerprint": str,
    "span_config": dict,
    "dtype": str,
    "units": int,
    "documents": int,
    "generation": int,
    "files": dict,
    "samples": dict,
}
#: Files every data folder holds (besides optional calibration and candidate files).
_REQUIRED_FILES = tuple(f"{name}.npy" for name in ARRAYS) + ("texts.bin", "doc_ids.json", SETTINGS_FILE)


def folder_entry(data_dir: str, name: str, folder: int | None) -> str:
    """The file ``name`` of ``data_dir`` as the index readers open it: the bare name inside the open ``folder`` (a
    descriptor from :func:`slice_st.text.open_folder`), or its path where folders cannot be opened (``None``)."""
    return name if folder is not None else os.path.join(data_dir, name)


def read_bytes(path: str, size: int | None = None, *, folder: int | None = None) -> bytes:
    """The bytes of a regular file of an index, opened without following a link
    (:func:`slice_st.text.open_regular_file`).

    What was checked is what is read: a link swapped in after an ``lstat`` check is refused, not followed.
    A link, a non-regular file or one whose size is not ``size``: :class:`FileAccessError`.
    """
    with open_regular_file(path, size, folder=folder) as handle:
        return handle.read()


def load_array(path: str, mmap: bool = False, size: int | None = None, *, folder: int | None = None) -> np.ndarray:
    """An ``.npy`` array of an index (no pickles), opened without following a link; memory-mapped with ``mmap``.

    The file is opened once (:func:`slice_st.text.open_regular_file`: ``O_NOFOLLOW``, then ``fstat``) and
    the array read or mapped from that descriptor, so a link swapped in after an earlier check is
    never followed. Not an ``.npy`` file, or one holding Python objects: ``ValueError``. ``folder``: a
    descriptor from :func:`slice_st.text.open_folder` that ``path`` (then a name) is inside.
    """
    with open_regular_file(path, size, folder=folder) as handle:
        if not mmap:
            return np.load(handle, allow_pickle=False)
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(handle)
        else:
            raise ValueError(f"{os.path.basename(path)}: .npy format {version} cannot be memory-mapped")
        if dtype.hasobject:
            raise ValueError(f"{os.path.basename(path)} holds Python objects (never loaded)")
        return np.memmap(
            handle, dtype=dtype, mode="r", shape=shape, order="F" if fortran_order else "C", offset=handle.tell()
        )


def _json_object(path: str, file_path: str, what: str, short: str) -> dict[str, Any]:
    """The JSON object in ``file_path`` (a file of the index at ``path``, never read through a link); else a clear
    error naming ``what``."""
    try:
        value = json.loads(read_bytes(file_path).decode("utf-8"))
    except FileAccessError as error:  # a link or not a regular file: refused, never followed
        raise SpanInputError(f"{path}: unreadable {short} ({error})") from None
    except OSError as error:
        raise FileAccessError(f"{path}: cannot read {what} ({error.strerror or error}).") from None
    except ValueError as error:
        raise SpanInputError(f"{path}: unreadable {short} ({error}).") from None
    except RecursionError:  # e.g. 100,000 nested "[": deeper than any index writes
        raise SpanInputError(f"{path}: unreadable {short} (JSON nested too deeply).") from None
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
    if os.path.islink(manifest_path):
        raise SpanInputError(
            f"{path}: unreadable index manifest ({MANIFEST} is a symbolic link; an index writes a regular file "
            "and reads nothing outside its folder)."
        )
    if not os.path.exists(manifest_path):
        if must_exist:
            if not os.path.isdir(path):
                raise FileNotFoundError(f"No index at {path!r}.")
            raise SpanInputError(f"{path} is not a SpanIndex (no {MANIFEST}; a save may have been interrupted).")
        return None
    manifest = _json_object(path, manifest_path, "the index manifest", "index manifest")
    if manifest.get("format_version") == 1:
        raise SpanInputError(
            f"{path} was built by an older slice-st (index format 1, whose model fingerprint sampled the "
            "weights): rebuild it (slice-st index build ... --force, or SpanIndex.build and save)."
        )
    if manifest.get("format_version") != INDEX_FORMAT_VERSION:
        raise SpanInputError(
            f"{path}: index format {manifest.get('format_version')!r} is not supported (expected "
            f"{INDEX_FORMAT_VERSION})."
        )
    for key, kind in _REQUIRED.items():
        value = manifest.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            raise SpanInputError(f"{path}: unreadable index manifest ({key!r} is missing or not a {kind.__name__}).")
    if manifest["generation"] > MAX_GENERATION:
        raise SpanInputError(
            f"{path}: unreadable index manifest (generation {str(manifest['generation'])[:20]}… is past "
            f"{MAX_GENERATION}; no index is saved that often)."
        )
    if not re.fullmatch(r"data-[\w.-]+", manifest["data"]):  # a folder inside the index, never a path elsewhere
        raise SpanInputError(
            f"{path}: unreadable index manifest (data folder {manifest['data']!r} is not a data folder name)."
        )
    if manifest["dtype"] not in ("float32", "float16"):
        raise SpanInputError(f"{path}: unreadable index manifest (dtype {manifest['dtype']!r}).")
    for name, entry in manifest["files"].items():  # plain names inside the data folder, each with its size and checksum
        if (
            not is_plain_name(name)
            or not isinstance(entry, dict)
            or not isinstance(entry.get("bytes"), int)
            or isinstance(entry.get("bytes"), bool)
            or entry["bytes"] < 0
            or not (isinstance(entry.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]))
        ):
            raise SpanInputError(
                f"{path}: unreadable index manifest (files entry {name!r} is not a file name in the data folder "
                "with its bytes and sha256)."
            )
    missing = [name for name in _REQUIRED_FILES if name not in manifest["files"]]
    if missing:
        raise SpanInputError(f"{path}: unreadable index manifest (files lacks {', '.join(missing)}).")
    if not all(isinstance(manifest["samples"].get(name), str) for name in ARRAYS):
        raise SpanInputError(
            f"{path}: unreadable index manifest (samples must hold a checksum of each of {', '.join(ARRAYS)})."
        )
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
    """The :data:`SHARD_LIST` of a sharded index directory (``None`` if it has none); unreadable:
    :class:`SpanInputError`."""
    list_path = os.path.join(path, SHARD_LIST)
    if os.path.islink(list_path):
        raise SpanInputError(
            f"{path}: unreadable {SHARD_LIST} (a symbolic link; nothing outside the index folder is read)."
        )
    if not os.path.isfile(list_path):
        return None
    shard_list = _json_object(path, list_path, SHARD_LIST, SHARD_LIST)
    shards = shard_list.get("shards", [])
    if not isinstance(shards, list):
        raise SpanInputError(f"{path}: unreadable {SHARD_LIST} (not an object with a list of shards).")
    bad = [name for name in shards if not is_plain_name(name)]
    if bad:
        raise SpanInputError(
            f"{path}: unreadable {SHARD_LIST} (shard {bad[0]!r} is not a folder name inside the index folder)."
        )
    refuse_linked_shards(path, shards, f"unreadable {SHARD_LIST}")
    return shard_list


def refuse_linked_shards(path: str, names: Sequence[str], what: str) -> None:
    """Refuse shards of the sharded index or directory of indexes ``path`` that are symbolic links.

    A shard is a folder inside ``path`` itself: a link (to an index outside, or to another shard inside)
    is never followed, the whole search is refused (:class:`SpanInputError` beginning ``path: what``).

    Args:
        path: The folder holding the shards.
        names: The shards' names in it.
        what: What is wrong with ``path``, the start of the message (``"unreadable shards.json"``).
    """
    for name in names:
        if os.path.islink(os.path.join(path, name)):
            raise SpanInputError(
                f"{path}: {what} (shard {name!r} is a symbolic link, not a folder inside the index folder; "
                "nothing outside it is read: name the index it points to instead)."
            )


def shard_directories(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Index directories named by ``paths``: each path is an index, or a directory of indexes (its sub-directories).

    In a directory of indexes every (non-hidden) sub-directory must be an index: one without a
    manifest (a shard whose build crashed) is an error, never skipped silently, and so is a symbolic
    link to a folder (:func:`refuse_linked_shards`, as for a sharded build's shards). A directory with a
    :data:`SHARD_LIST` (built on Ray) stands for the shards it lists, once its build is complete.

    Args:
        paths: An index folder, a sharded build's folder, or a list of them.

    Returns:
        The shard folders, in order.

    Example:
        >>> shard_directories([])
        Traceback (most recent call last):
        ...
        slice_st.errors.SpanInputError: No index directories given.
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
                raise SpanInputError(
                    f"{path}: its sharded build has not finished ({SHARD_LIST} is not complete); "
                    "run the same build again to resume it."
                )
            names = [name for name in shard_list["shards"] if is_plain_name(name)]
            if not names or len(names) != len(shard_list["shards"]):
                raise SpanInputError(
                    f"{path}: unreadable {SHARD_LIST} (no shards, or a shard name that is not a folder name)."
                )
            directories.extend(os.path.join(path, name) for name in names)
        elif os.path.isdir(path):
            entries = sorted((e for e in os.scandir(path) if not e.name.startswith(".")), key=lambda e: e.name)
            if any(_DATA_NAME.fullmatch(e.name) and e.is_dir() for e in entries):
                raise SpanInputError(f"{path} is not a SpanIndex (no {MANIFEST}; a save may have been interrupted).")
            refuse_linked_shards(path, [e.name for e in entries if e.is_dir()], "a directory of indexes holds a link")
            inside = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
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
