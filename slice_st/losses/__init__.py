"""Training losses, one per file: :class:`SpanMaxCrossEntropyLoss` (SLICE, Orbach et al., 2024) and
:class:`SpanDistillationLoss` (span self-distillation, no labels); losses under study are in ``research/``."""

from slice_st.losses.span_distillation import SpanDistillationLoss
from slice_st.losses.span_max_cross_entropy import SpanMaxCrossEntropyLoss

__all__ = ["SpanMaxCrossEntropyLoss", "SpanDistillationLoss"]
