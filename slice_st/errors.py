"""Every exception and warning class of slice-st, in one place (the lowest layer: no slice_st imports); each
subclasses one built-in, so ``except ValueError`` / ``except OSError`` catch them as Python's own would."""

from __future__ import annotations

__all__ = [
    "CorpusError",
    "DataFormatError",
    "FileAccessError",
    "HubAccessError",
    "IndexBusyError",
    "IndexConflictError",
    "MissingExtraError",
    "ModelLoadError",
    "SpanInputError",
    "SpanPoolingWarning",
    "WindowError",
]


class SpanInputError(ValueError):
    """Bad input to the span API (not a string, empty query list, impossible settings)."""


class SpanPoolingWarning(UserWarning):
    """The model's sentence embedding is not a plain mean of its token vectors, as span and query vectors are."""


class ModelLoadError(OSError):
    """A model that cannot be loaded or used (an ``OSError``, as Hugging Face's loaders raise)."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message says which ``slice-st[extra]`` brings it."""


class FileAccessError(OSError):
    """A file or folder that exists but cannot be read or written (permissions, a file where a folder is needed…)."""


class WindowError(ValueError):
    """A text that cannot be cut into model windows; ``text_index`` names it, ``reason`` says why."""

    def __init__(self, text_index: int, reason: str) -> None:
        super().__init__(f"Text {text_index}: {reason}")
        self.text_index, self.reason = text_index, reason


class DataFormatError(ValueError):
    """A data file that cannot be used as it is; the message names the file and the line."""


class CorpusError(ValueError):
    """A corpus record that cannot be indexed; the message names the file and the line."""


class IndexBusyError(SpanInputError):
    """Another process holds the index directory's writer lock (it is saving or updating the index)."""


class IndexConflictError(SpanInputError):
    """The index directory was saved by someone else after this index was loaded from it: saving would lose that."""


class HubAccessError(ValueError):
    """A Hub push that cannot succeed (offline, no token, no write access), found before training."""
