"""Training losses, one per file: :class:`SpanMaxCrossEntropyLoss` (SLICE), :class:`SpanDistillationLoss`
(span self-distillation), :class:`SpanScoreDistillationLoss` (span similarities of a teacher of any size) and
:class:`SpanMaxCoSENTLoss` (graded similarity of the best span)."""

from slice_st.losses.span_distillation import DISTILLATION_METRICS, SpanDistillationLoss
from slice_st.losses.span_max_cosent import SpanMaxCoSENTLoss
from slice_st.losses.span_score_distillation import SpanScoreDistillationLoss
from slice_st.losses.span_max_cross_entropy import SLICE_CITATION, SpanMaxCrossEntropyLoss, column_span_scores

__all__ = ["SpanMaxCrossEntropyLoss", "SpanDistillationLoss", "SpanMaxCoSENTLoss", "SpanScoreDistillationLoss", "column_span_scores", "DISTILLATION_METRICS", "SLICE_CITATION"]
