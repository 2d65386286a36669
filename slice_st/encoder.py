"""``SpanEncoder``: a ``SentenceTransformer`` whose span methods are real methods (what :func:`slice_st.load_model`
returns). It saves as a plain ``SentenceTransformer`` (same ``model_type``), so what it writes loads anywhere."""

from __future__ import annotations

from sentence_transformers import SentenceTransformer

from slice_st.encode import encode_span_queries, encode_spans
from slice_st.search import best_spans

__all__ = ["SpanEncoder"]


class SpanEncoder(SentenceTransformer):
    """A ``SentenceTransformer`` with span methods: :meth:`encode_spans`, :meth:`encode_span_queries` and
    :meth:`best_spans` (the functions of :mod:`slice_st.encode` and :mod:`slice_st.search`, ``self`` as the model).

    Built as a ``SentenceTransformer`` is (``SpanEncoder("org/slice-bert")``), or by :func:`slice_st.load_model`.

    Args:
        model_name_or_path: A folder or Hub id, as for ``SentenceTransformer``; every other argument is its too.

    Example:
        >>> from slice_st import load_model
        >>> model = load_model()
        >>> type(model).__name__, model.best_spans("a dog", "The cat and the puppy slept.", max_span=3)[0][0][0].span
        ('SpanEncoder', 'the puppy')
    """

    encode_spans = encode_spans
    encode_span_queries = encode_span_queries
    best_spans = best_spans
