"""slice-st: span-aggregatable token embeddings (SLICE) for phrase mining with sentence-transformers.

>>> import slice_st
>>> model = slice_st.load_model()                # embedded all-MiniLM-L6-v2, offline
>>> best = model.best_spans(["plays the guitar"], ["Yesterday a man played the guitar badly."], max_span=5)
>>> best[0][0][0].span
'played the guitar'
"""

from __future__ import annotations

from sentence_transformers import SentenceTransformer

from slice_st.config import (
    SpanConfig,
    default_model_path,
    enable_span_features,
    get_span_config,
    load_model,
    save_slice_model,
    set_span_config,
)
from slice_st.encode import (
    SpanEncoding,
    SpanInputError,
    SpanMatch,
    SpanSearchResult,
    best_spans,
    best_spans_paired,
    embed_texts,
    encode_spans,
)
from slice_st.calibration import Calibration
from slice_st.index import IndexMatch, ShardedSpanIndex, SpanIndex
from slice_st.distillation import SpanDistillationLoss
from slice_st.losses import SpanMaxCrossEntropyLoss
from slice_st.pooling import SpanPooling
from slice_st.evaluation import SpanRetrievalEvaluator, williams_test

__version__ = "0.1.0"

__all__ = [
    "Calibration",
    "ShardedSpanIndex",
    "SpanConfig",
    "IndexMatch",
    "SpanEncoding",
    "SpanIndex",
    "SpanInputError",
    "SpanMatch",
    "SpanMaxCrossEntropyLoss",
    "SpanDistillationLoss",
    "SpanPooling",
    "SpanRetrievalEvaluator",
    "STSBContext",
    "williams_test",
    "SpanSearchResult",
    "best_spans",
    "best_spans_paired",
    "default_model_path",
    "embed_texts",
    "enable_span_features",
    "encode_spans",
    "get_span_config",
    "load_model",
    "save_slice_model",
    "set_span_config",
]


def _attach_methods() -> None:
    """Make ``encode_spans``/``best_spans`` methods of every ``SentenceTransformer`` (never clobbering ST's own)."""
    for function in (encode_spans, best_spans):
        existing = getattr(SentenceTransformer, function.__name__, None)
        if existing is None or getattr(existing, "__module__", "").startswith("slice_st"):
            setattr(SentenceTransformer, function.__name__, function)


_attach_methods()


def __getattr__(name: str):
    """``slice_st.STSBContext`` is imported lazily: importing mteb takes seconds."""
    if name == "STSBContext":
        from slice_st.mteb_tasks import STSBContext

        return STSBContext
    raise AttributeError(f"module 'slice_st' has no attribute {name!r}")
