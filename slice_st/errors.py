"""Every exception and warning class of slice-st, in one place (the lowest layer: no slice_st imports).

The modules that raise them re-export them under their old names too (``slice_st.errors.SpanInputError`` is
:class:`SpanInputError`), so ``except`` clauses written against either path catch the same class.
"""

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


class SpanInputError(ValueError, TypeError):
    """Bad input to the span API (not a string, empty query list, impossible settings).

    A ``ValueError`` and, for wrong types, also a ``TypeError``, so either ``except`` catches it.
    """


class SpanPoolingWarning(UserWarning):
    """The model's sentence embedding is not a plain mean of its token vectors (CLS/max pooling, or a
    Dense or other module after pooling), while span and query vectors are token means."""


class ModelLoadError(OSError, ValueError):
    """A model that cannot be loaded or used: not a model folder, missing or broken weights/config/tokenizer,
    a Hub id that cannot be fetched (offline). An ``OSError`` (as Hugging Face's loaders raise) and a ``ValueError``."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message says which ``slice-st[extra]`` brings it."""


class FileAccessError(OSError, ValueError):
    """A file or folder that exists but cannot be read or written (permissions, a file where a folder is needed…).

    An ``OSError`` (what the operating system said) and a ``ValueError`` (bad input), like ``io.UnsupportedOperation``.
    """


class WindowError(ValueError):
    """A text that cannot be cut into model windows; ``text_index`` names it, ``reason`` says why (without the
    index)."""

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
