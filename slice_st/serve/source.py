"""The index a server answers from: in memory, or a saved directory re-opened when another process saves it."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from slice_st.index.span_index import SpanIndex
from slice_st.index.storage import MANIFEST, read_manifest


class IndexSource:
    """Hands out the current :class:`SpanIndex` (``directory``: where it was saved; ``None``: in memory).

    Each :meth:`current` call compares the manifest's identity (inode, size, mtime) with the one loaded and loads a
    newer save with the same model; an index removed since is an error, never the removed documents. A search holding
    an older index keeps reading it (its memory-mapped arrays stay valid).
    """

    def __init__(self, index: SpanIndex, directory: str | os.PathLike | None = None) -> None:
        self._index = index
        self.directory = None if directory is None else os.fspath(directory)
        self._lock = threading.Lock()
        self._stamp = self._manifest_stamp()
        self.reloads = 0

    @classmethod
    def from_directory(cls, path: str | os.PathLike, model=None) -> IndexSource:
        """Load the index saved at ``path`` (with ``model``, else the model it records)."""
        return cls(SpanIndex.load(path, model), path)

    @classmethod
    def from_files(cls, paths: Sequence[str], model=None, **options) -> IndexSource:
        """Build an in-memory index from text or JSONL files (:meth:`SpanIndex.from_files` options)."""
        return cls(SpanIndex.from_files(list(paths), model, **options))

    def _manifest_stamp(self):
        if self.directory is None:
            return None
        try:
            stat = os.stat(os.path.join(self.directory, MANIFEST))
        except OSError:
            return None
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def current(self) -> SpanIndex:
        """The index to answer from now (re-opened first when the directory holds a newer save)."""
        if self.directory is None:
            return self._index
        stamp = self._manifest_stamp()
        if stamp is None:  # a save replaces the manifest in one rename: it is never missing, unless removed
            read_manifest(self.directory, must_exist=True)  # the error saying what is gone
        if stamp == self._stamp:
            return self._index
        with self._lock:
            if stamp == self._stamp:
                return self._index
            read_manifest(self.directory, must_exist=True)  # a clear error if the directory no longer holds an index
            self._index = SpanIndex.load(self.directory, self._index.model)
            self._stamp = stamp
            self.reloads += 1
            return self._index
