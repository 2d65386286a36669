"""Span retrieval evaluation (STS-B-Context, Orbach et al., 2024): the evaluator and its setups
(``span_retrieval``) and where the best span lands (``localisation``)."""

from slice_st.evaluation.localisation import locate_paraphrase, span_localisation
from slice_st.evaluation.span_retrieval import (
    SETUPS,
    SetupResult,
    SpanRetrievalEvaluator,
    correlations,
    score_full,
    score_single,
)

__all__ = [
    "SpanRetrievalEvaluator",
    "SETUPS",
    "SetupResult",
    "score_full",
    "score_single",
    "span_localisation",
    "locate_paraphrase",
    "correlations",
]
