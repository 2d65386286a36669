"""Span retrieval evaluation (STS-B-Context, Orbach et al., 2024): the evaluator, the three setups
(``setups``: full context, per-n-gram forward, single forward), correlations and the Williams test
(``statistics``), where the best span lands (``localisation``), baselines and the Table-1 runner (``baselines``,
``table``); PEARL's phrase tasks
(``phrase_tasks``) and Nugget's document paraphrase identification with span vectors (``document_similarity``).
"""

from slice_st.evaluation.document_similarity import ParaphraseIdentificationEvaluator
from slice_st.evaluation.localisation import locate_paraphrase, span_localisation
from slice_st.evaluation.phrase_tasks import (
    BirdEvaluator,
    EntityClusteringEvaluator,
    PairClassificationEvaluator,
    TurneyEvaluator,
)
from slice_st.evaluation.setups import (
    NGRAMS_PER_CALL,
    SCORERS,
    SETUPS,
    SetupResult,
    ngram_offsets,
    score_full,
    score_ngram,
    score_single,
)
from slice_st.evaluation.span_retrieval import SpanRetrievalEvaluator
from slice_st.evaluation.statistics import compare_to_best, correlations, williams_test

__all__ = [
    "BirdEvaluator",
    "EntityClusteringEvaluator",
    "PairClassificationEvaluator",
    "ParaphraseIdentificationEvaluator",
    "TurneyEvaluator",
    "SETUPS",
    "SCORERS",
    "NGRAMS_PER_CALL",
    "SetupResult",
    "SpanRetrievalEvaluator",
    "span_localisation",
    "locate_paraphrase",
    "correlations",
    "ngram_offsets",
    "score_full",
    "score_ngram",
    "score_single",
    "williams_test",
    "compare_to_best",
]
