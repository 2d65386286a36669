"""An index on disk: the manifest, atomic writes (fsync, then one ``os.replace``), the save lock, shard directories.

A directory holds ``manifest.json``, which names a data folder ``data-<n>/`` of ``.npy`` arrays. A save
writes a new data folder and then replaces the manifest atomically, so a crash never leaves a half
index that loads; saves to one directory are serialised by ``.lock`` (``flock``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from slice_st.encode import SpanInputError

__all__ = ["INDEX_FORMAT_VERSION", "MANIFEST", "ARRAYS", "LOCK_FILE", "save_lock", "write_bytes", "save_array", "read_manifest",
           "shard_directories"]

INDEX_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARRAYS = ("unit_vectors", "unit_chars", "span_norms", "segment_units", "segment_docs", "segment_first_unit", "text_offsets")
LOCK_FILE = ".lock"


@contextmanager
def save_lock(path: str):
    """Hold ``path/.lock`` for a save (``fcntl.flock``, released if the process dies; ``O_EXCL`` where there is no fcntl)."""
    lock_path = os.path.join(path, LOCK_FILE)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        try:
            handle = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            raise SpanInputError(
                f"{path} is being saved by another process (lock file {lock_path}; delete it if no save is running)."
            ) from None
        try:
            os.write(handle, f"pid {os.getpid()}".encode())
            yield
        finally:
            os.close(handle)
            os.remove(lock_path)
        return
    with open(lock_path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise SpanInputError(f"{path} is being saved by another process ({holder}); try again when that save has finished.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield  # closing the file releases the lock


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


def read_manifest(path: str, must_exist: bool) -> dict[str, Any] | None:
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.exists(manifest_path):
        if must_exist:
            if not os.path.isdir(path):
                raise FileNotFoundError(f"No index at {path!r}.")
            raise SpanInputError(f"{path} is not a SpanIndex (no {MANIFEST}; a save may have been interrupted).")
        return None
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise SpanInputError(f"{path}: unreadable index manifest ({error}).") from None


def shard_directories(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Index directories named by ``paths``: each path is an index, or a directory of indexes (its sub-directories).

    >>> shard_directories([])
    Traceback (most recent call last):
    ...
    slice_st.encode.SpanInputError: No index directories given.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    directories: list[str] = []
    for path in map(os.fspath, paths):
        if os.path.exists(os.path.join(path, MANIFEST)):
            directories.append(path)
        elif os.path.isdir(path):
            inside = sorted(e.path for e in os.scandir(path) if e.is_dir() and os.path.exists(os.path.join(e.path, MANIFEST)))
            if not inside:
                raise SpanInputError(f"{path} is neither an index (no {MANIFEST}) nor a directory of indexes.")
            directories.extend(inside)
        else:
            raise FileNotFoundError(f"No index at {path!r}.")
    if not directories:
        raise SpanInputError("No index directories given.")
    return directories
