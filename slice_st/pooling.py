"""Deprecated module path of :class:`~slice_st.models.span_pooling.SpanPooling`, kept for saved checkpoints.

Models saved with a ``SpanPooling`` module before slice-st 0.2 name ``slice_st.pooling.SpanPooling`` in their
``modules.json``; this module lets them load (with ``trust_remote_code=True``, as before). Models saved now name
``slice_st.models.span_pooling.SpanPooling``. Import ``SpanPooling`` from ``slice_st`` instead.
"""

from __future__ import annotations

import warnings

from slice_st.models.span_pooling import SpanPooling

__all__ = ["SpanPooling"]

warnings.warn(
    "slice_st.pooling is deprecated: SpanPooling lives in slice_st.models.span_pooling (import it from slice_st); "
    "re-save the model to update its modules.json.",
    DeprecationWarning,
    stacklevel=2,
)
