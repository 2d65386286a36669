"""The index a server answers from: in memory, or a saved directory re-opened when another process saves it."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from slice_st.index.span_index import SpanIndex
from slice_st.index.storage import MANIFEST

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


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
        self._stamp = self._manifest_stamp() if self.directory is not None else None
        self.reloads = 0

    @classmethod
    def from_directory(
        cls, path: str | os.PathLike, model: SentenceTransformer | None = None, **options
    ) -> IndexSource:
        """The index saved at ``path`` (:meth:`SpanIndex.load`: ``model``, else the one it records; ``device``…)."""
        return cls(SpanIndex.load(path, model, **options), path)

    def _manifest_stamp(self):
        try:
            stat = os.stat(os.path.join(self.directory, MANIFEST))
        except OSError:
            return None
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def current(self) -> SpanIndex:
        """The index to answer from now (re-opened first when the directory holds a newer save)."""
        if self.directory is None:
            return self._index
        # a save replaces the manifest in one rename: never missing unless removed
        stamp = self._manifest_stamp()
        if stamp == self._stamp:
            return self._index
        with self._lock:
            if stamp == self._stamp:
                return self._index
            # a clear error if no index is left there
            self._index = SpanIndex.load(self.directory, self._index.model)
            self._stamp = stamp
            self.reloads += 1
            return self._index
