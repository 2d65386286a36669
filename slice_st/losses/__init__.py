"""Training losses, one per file: :class:`SpanMaxCrossEntropyLoss` (SLICE, Orbach et al., 2024) and
:class:`SpanDistillationLoss` (span self-distillation, no labels). Losses under study live in
:mod:`slice_st.experimental`."""

from slice_st.card import SLICE_CITATION
from slice_st.losses.span_distillation import DISTILLATION_METRICS, SpanDistillationLoss
from slice_st.losses.span_max_cross_entropy import SpanMaxCrossEntropyLoss, column_span_scores

__all__ = [
    "SpanMaxCrossEntropyLoss",
    "SpanDistillationLoss",
    "column_span_scores",
    "DISTILLATION_METRICS",
    "SLICE_CITATION",
]
