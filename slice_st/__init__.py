"""slice-st: span-aggregatable token embeddings (SLICE) for phrase mining with sentence-transformers.

>>> import slice_st
>>> model = slice_st.load_model()                # a slice_st.SpanEncoder: the shipped slice-minilm, offline
>>> model.best_spans(["plays the guitar"], ["Yesterday a man played the guitar badly."], max_span=5)[0][0][0].span
'played the guitar'

Importing the package is light: every public name is loaded on first use (PEP 562); the span methods reach
``SentenceTransformer`` when ``sentence_transformers`` is imported (:mod:`slice_st._attach`), as they are methods of
:class:`slice_st.SpanEncoder`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from slice_st import _attach

# the names as type checkers and IDEs see them; at run time __getattr__ loads each on first use
if TYPE_CHECKING:
    from slice_st.config import get_span_config, set_span_config
    from slice_st.encode import encode_span_queries, encode_spans
    from slice_st.encoder import SpanEncoder
    from slice_st.errors import (
        FileAccessError,
        IndexBusyError,
        IndexConflictError,
        ModelLoadError,
        SpanInputError,
    )
    from slice_st.evaluation.span_retrieval import SpanRetrievalEvaluator
    from slice_st.index.span_index import SpanIndex
    from slice_st.integrations.mteb import STSBContext
    from slice_st.loading import export_model, load_model, save_slice_model
    from slice_st.losses.span_distillation import SpanDistillationLoss
    from slice_st.losses.span_max_cross_entropy import SpanMaxCrossEntropyLoss
    from slice_st.models.span_pooling import SpanPooling
    from slice_st.scoring import SpanScorer
    from slice_st.search import best_spans

__version__ = "0.1.0"

#: Where each public name is defined. Everything else is imported from its sub-package
#: (``slice_st.index.ShardedSpanIndex``, ``slice_st.search.SpanMatch``, ``slice_st.errors.DataFormatError``).
_MODULES = {
    "slice_st.loading": ("load_model", "save_slice_model", "export_model"),
    "slice_st.config": ("set_span_config", "get_span_config"),
    "slice_st.encoder": ("SpanEncoder",),
    "slice_st.encode": ("encode_spans", "encode_span_queries"),
    "slice_st.search": ("best_spans",),
    "slice_st.scoring": ("SpanScorer",),
    "slice_st.models.span_pooling": ("SpanPooling",),
    "slice_st.losses.span_max_cross_entropy": ("SpanMaxCrossEntropyLoss",),
    "slice_st.losses.span_distillation": ("SpanDistillationLoss",),
    "slice_st.evaluation.span_retrieval": ("SpanRetrievalEvaluator",),
    "slice_st.integrations.mteb": ("STSBContext",),  # importing mteb takes seconds
    "slice_st.index.span_index": ("SpanIndex",),
    "slice_st.errors": (
        "SpanInputError",
        "ModelLoadError",
        "FileAccessError",
        "IndexBusyError",
        "IndexConflictError",
    ),
}
#: Public name → the module that defines it.
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

#: Sub-modules and sub-packages reachable as attributes (``slice_st.index``).
_SUBMODULES = tuple(
    "spans scoring rerank tokens text files backends errors config loading encode search encoder "
    "models multi_vector losses data evaluation index training integrations cli".split()
)

__all__ = [
    "load_model",
    "save_slice_model",
    "export_model",
    "set_span_config",
    "get_span_config",
    "SpanEncoder",
    "encode_spans",
    "encode_span_queries",
    "best_spans",
    "SpanScorer",
    "SpanPooling",
    "SpanMaxCrossEntropyLoss",
    "SpanDistillationLoss",
    "SpanRetrievalEvaluator",
    "STSBContext",
    "SpanIndex",
    "SpanInputError",
    "ModelLoadError",
    "FileAccessError",
    "IndexBusyError",
    "IndexConflictError",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))


_attach.attach_when_imported(
    "sentence_transformers", lambda: __getattr__("search").attach_methods()
)
