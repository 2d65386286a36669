"""sentence-transformers modules: :class:`SpanPooling` (mean pooling that also yields every span's vector)."""

from slice_st.models.span_pooling import SpanPooling

__all__ = ["SpanPooling"]
