"""Every exception and warning class of slice-st, in one place (the lowest layer: no slice_st imports). Each error is
a :class:`SliceError` (catch that for all of them) and subclasses one built-in, so ``except ValueError`` /
``except OSError`` catch them as Python's own would."""

from __future__ import annotations

__all__ = [
    "CorpusError",
    "DataFormatError",
    "ExactTierError",
    "FileAccessError",
    "HubAccessError",
    "IndexBusyError",
    "IndexConflictError",
    "IndexFileError",
    "MissingExtraError",
    "ModelLoadError",
    "RayClusterError",
    "SliceError",
    "SpanInputError",
    "SpanPoolingWarning",
    "WindowError",
]


class SliceError(Exception):
    """The base of every slice-st error: what the user can fix (the CLI prints it as one line)."""


class SpanInputError(SliceError, ValueError):
    """Bad input or arguments (not a string, empty query list, impossible settings); its subclasses say more."""


class SpanPoolingWarning(UserWarning):
    """The model's sentence embedding is not a plain mean of its token vectors, as span and query vectors are."""


class ModelLoadError(SliceError, OSError):
    """A model that cannot be loaded or used (an ``OSError``, as Hugging Face's loaders raise)."""


class MissingExtraError(SliceError, ImportError):
    """An optional dependency is not installed; the message says which ``slice-st[extra]`` brings it."""


class FileAccessError(SliceError, OSError):
    """A file or folder that exists but cannot be read or written (permissions, a file where a folder is needed…)."""


class WindowError(SpanInputError):
    """A text that cannot be cut into model windows: ``text_index`` names it, ``reason`` says why, ``errors`` lists
    every such ``(text index, reason)`` of the call (this one first)."""

    def __init__(
        self, text_index: int, reason: str, errors: list[tuple[int, str]] | None = None
    ) -> None:
        more = f" (and {len(errors) - 1} more)" if errors and len(errors) > 1 else ""
        super().__init__(f"Text {text_index}: {reason}{more}")
        self.text_index, self.reason = text_index, reason
        self.errors = list(errors) if errors else [(text_index, reason)]

    def __reduce__(self):  # pickled across processes (Ray, multiprocessing) with its fields
        return type(self), (self.text_index, self.reason, self.errors)


class IndexFileError(SpanInputError):
    """An index folder or file that cannot be used: no manifest, a manifest or shard list that is unreadable or lacks
    a field, data missing, truncated or changed (a ``ValueError``, as ``json`` reports a bad file)."""


class ExactTierError(SpanInputError):
    """An operation that needs the exact tier (every unit's vector and span norms) on a compressed index built
    without it (``exact_tier=False``): retraining or re-coding the compressed tier, the FAISS candidate stage, merging
    with an index that keeps it. Such an index searches by re-encoding its candidate documents instead."""


class RayClusterError(SpanInputError, RuntimeError):
    """The Ray cluster cannot run the job: nothing answers at its address, it fails to start, it has no room for the
    workers asked for. A ``RuntimeError``; also a :class:`SpanInputError`, so code catching that still catches it."""


class DataFormatError(SliceError, ValueError):
    """A data file that cannot be used as it is; the message names the file and the line."""


class CorpusError(SliceError, ValueError):
    """A corpus record that cannot be indexed; the message names the file and the line."""


class IndexBusyError(SpanInputError):
    """Another process holds the index directory's writer lock (it is saving or updating the index)."""


class IndexConflictError(SpanInputError):
    """The index directory was saved by someone else after this index was loaded from it: saving would lose that."""


class HubAccessError(SliceError, ValueError):
    """A Hub push that cannot succeed (offline, no token, no write access), found before training."""
