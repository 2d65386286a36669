"""Training losses, one per file: :class:`SpanMaxCrossEntropyLoss` (SLICE, Orbach et al., 2024) and
:class:`SpanDistillationLoss` (span self-distillation, no labels). Losses under study live in
the repository's ``research/`` folder."""

from slice_st.losses.span_distillation import SpanDistillationLoss
from slice_st.losses.span_max_cross_entropy import SpanMaxCrossEntropyLoss

__all__ = ["SpanMaxCrossEntropyLoss", "SpanDistillationLoss"]
