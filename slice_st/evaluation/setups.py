"""How the evaluator scores a pair (STS-B-Context, Orbach et al., 2024): an origin phrase against a passage that holds
a paraphrase of it, judged by correlation with the gold 0-5 scores.

* ``full``: one vector per passage (``model.encode``), cosine to the phrase's vector;
* ``single``: one forward pass per passage, every span mean-pooled from its token vectors
  (:func:`slice_st.encode.best_spans_paired`); the best span wins.

The paper's per-n-gram setup (every n-gram encoded on its own) is a baseline in ``research/baselines.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slice_st.encode import best_spans_paired
from slice_st.scoring import SpanScorer, resolve_scorer

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

SETUPS = ("full", "single")


@dataclass
class SetupResult:
    """Predicted scores of one system in one setup.

    Args:
        scores: ``(N,)`` predicted scores.
        spans: Best span per passage as ``(start, end)`` characters (span setups; ``None`` for none).
        seconds: Wall time of the setup.
        extra: Anything else the setup reports.
    """

    scores: np.ndarray
    spans: list[tuple[int, int] | None] | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def check_inputs(phrases: Sequence[str], passages: Sequence[str]) -> tuple[list[str], list[str]]:
    """The pairs as lists, checked: as many phrases as passages, none empty."""
    phrases, passages = list(phrases), list(passages)
    if len(phrases) != len(passages):
        raise ValueError(f"phrases and passages must pair up: got {len(phrases)} phrases and {len(passages)} passages.")
    for what, values in (("phrases", phrases), ("passages", passages)):
        for index, value in enumerate(values):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{what}[{index}] is empty or not a string: {value!r:.60}.")
    return phrases, passages


def _encode(model, texts: list[str], batch_size: int, show_progress_bar: bool) -> torch.Tensor:
    vectors = model.encode(texts, batch_size=batch_size, show_progress_bar=show_progress_bar, convert_to_tensor=True)
    return torch.nn.functional.normalize(vectors.float(), dim=-1)


def score_full(
    model: SentenceTransformer,
    phrases: Sequence[str],
    passages: Sequence[str],
    *,
    batch_size: int = 32,
    show_progress_bar: bool = False,
) -> SetupResult:
    """Full-context setup: cosine of ``model.encode(phrase)`` and ``model.encode(passage)`` per pair.

    Args:
        model: A ``SentenceTransformer``.
        phrases: Origin phrase of each pair.
        passages: Passage of each pair.
        batch_size: Batch size of ``model.encode``.
        show_progress_bar: Show a progress bar.

    Returns:
        A :class:`SetupResult` with one cosine per pair.

    Example:
        >>> from slice_st import load_model
        >>> result = score_full(load_model(), ["a dog"], ["A puppy slept on the porch."])
        >>> result.scores.shape
        (1,)
    """
    phrases, passages = check_inputs(phrases, passages)
    queries = _encode(model, phrases, batch_size, show_progress_bar)
    documents = _encode(model, passages, batch_size, show_progress_bar)
    return SetupResult((queries * documents).sum(-1).cpu().numpy().astype(np.float64))


def check_all_scored(scores: np.ndarray, passages: list[str]) -> None:
    """Refuse a passage without a span to score (no tokens)."""
    missing = np.flatnonzero(~np.isfinite(scores))
    if len(missing):
        raise ValueError(
            f"passages[{int(missing[0])}] has no span to score (no tokens?): {passages[int(missing[0])]!r:.60}."
        )


def score_single(
    model: SentenceTransformer,
    phrases: Sequence[str],
    passages: Sequence[str],
    *,
    min_span: int = 1,
    max_span: int = 20,
    unit: str = "word",
    batch_size: int = 32,
    show_progress_bar: bool | None = None,
    scorer: str | SpanScorer | None = None,
) -> SetupResult:
    """Single-pass setup (SLICE): one forward pass per passage, the best span per pair.

    The arguments are :func:`slice_st.encode.best_spans_paired`'s, which scores; ``scorer`` decides the best span
    and gives its score (``"max-cosine"`` is the paper's protocol). ``extra["similarities"]`` lists the best spans'
    plain cosines.

    Args:
        model: A ``SentenceTransformer``.
        phrases: Origin phrase of each pair.
        passages: Passage of each pair.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"``.
        batch_size: Batch size of the forward passes.
        show_progress_bar: Show a progress bar (``None``: for long inputs).
        scorer: Which span wins and its score (``None``: the default scorer).

    Returns:
        A :class:`SetupResult` with the best span's score and span per pair.

    Example:
        >>> from slice_st import load_model
        >>> score_single(load_model(), ["a dog"], ["The cat and the puppy slept."], max_span=3).spans
        [(12, 21)]
    """
    phrases, passages = check_inputs(phrases, passages)
    spans = {"min_span": min_span, "max_span": max_span, "unit": unit, "scorer": scorer}
    matches = best_spans_paired(
        model, phrases, passages, batch_size=batch_size, show_progress_bar=show_progress_bar, **spans
    )
    scores = np.array([match.score if match is not None else -np.inf for match in matches], dtype=np.float64)
    check_all_scored(scores, passages)
    similarities = [float(match.similarity) for match in matches]  # JSON-ready: the table caches extras
    return SetupResult(
        scores,
        [(match.start, match.end) for match in matches],
        extra={"scorer": resolve_scorer(scorer).name, "similarities": similarities},
    )


SCORERS = {"full": score_full, "single": score_single}
