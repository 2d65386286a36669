"""Span retrieval evaluation (STS-B-Context, Orbach et al., 2024): the evaluator, its setups (``setups``: full
context, single forward pass), correlations (``statistics``) and where the best span lands (``localisation``). The
paper's Table-1 runner and baselines are in the repository's ``research/`` folder.
"""

from slice_st.evaluation.localisation import locate_paraphrase, span_localisation
from slice_st.evaluation.setups import SETUPS, SetupResult, score_full, score_single
from slice_st.evaluation.span_retrieval import SpanRetrievalEvaluator
from slice_st.evaluation.statistics import correlations

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
