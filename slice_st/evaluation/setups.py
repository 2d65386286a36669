"""The three setups of span retrieval evaluation (STS-B-Context, Orbach et al., 2024): how each scores a pair.

A pair is an origin phrase and a passage that contains a paraphrase of it somewhere; its predicted
score is the similarity of the phrase to the passage, and a system is judged by Pearson and Spearman
correlation with the gold 0-5 scores. Three setups (Table 1 of the paper):

* ``full``: one vector per passage (``model.encode``), cosine to the phrase's vector;
* ``ngram``: every ``min_span..max_span``-unit n-gram of the passage encoded **on its own**
  (``model.encode``, one input per n-gram: N·K forward passes); the best cosine wins;
* ``single``: one forward pass per passage, every span mean-pooled from its token vectors
  (:func:`slice_st.encode.best_spans_paired`); the best cosine wins.

Units are those of the span core (:mod:`slice_st.tokens`): a word is a whitespace-delimited word for
the usual tokenizers, so n-grams and single-pass spans are the same character ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from slice_st.encode import best_spans_paired
from slice_st.scoring import SpanScorer, resolve_scorer
from slice_st.spans import span_grid
from slice_st.tokens import text_units

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

SETUPS = ("full", "ngram", "single")
#: n-grams sent to one ``model.encode`` call in the per-n-gram setup (bounds memory).
NGRAMS_PER_CALL = 8192


@dataclass
class SetupResult:
    """Predicted scores of one system in one setup: ``scores`` ``(N,)`` and, for span setups, the
    best span of each passage as character offsets ``spans[i] = (start, end)`` (``None`` for none).

    Args:
        scores: ``(N,)`` predicted scores.
        spans: Best span per passage as ``(start, end)`` characters (span setups).
        seconds: Wall time of the setup.
        extra: Anything else the setup reports (e.g. ``ngrams``).
    """

    scores: np.ndarray
    spans: list[tuple[int, int] | None] | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def check_inputs(phrases: Sequence[str], passages: Sequence[str]) -> tuple[list[str], list[str]]:
    phrases, passages = list(phrases), list(passages)
    if len(phrases) != len(passages):
        raise ValueError(f"phrases and passages must pair up: got {len(phrases)} phrases and {len(passages)} passages.")
    for what, values in (("phrases", phrases), ("passages", passages)):
        for index, value in enumerate(values):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{what}[{index}] is empty or not a string: {value!r:.60}.")
    return phrases, passages


def ngram_offsets(
    tokenizer, texts: Sequence[str], min_span: int = 1, max_span: int = 20, unit: str = "word"
) -> list[np.ndarray]:
    """Character offsets ``(S, 2)`` of every ``min_span..max_span``-unit n-gram of each text, start-major.

    Units come from :func:`slice_st.tokens.text_units` (the span core's definition), and n-grams from
    :func:`slice_st.spans.span_grid`, so they are exactly the
    spans :func:`slice_st.encode_spans` produces.

    Args:
        tokenizer: The model's fast tokenizer.
        texts: The passages.
        min_span: Shortest n-gram, in units.
        max_span: Longest n-gram, in units.
        unit: ``"word"`` or ``"token"``.

    Returns:
        One ``(S, 2)`` array of character offsets per text.

    Example:
        >>> from transformers import AutoTokenizer
        >>> from slice_st.loading import default_model_path
        >>> tokenizer = AutoTokenizer.from_pretrained(default_model_path())
        >>> text = "A man's guitar."
        >>> [text[s:e] for s, e in ngram_offsets(tokenizer, [text], 1, 2)[0]]
        ['A', "A man's", "man's", "man's guitar.", 'guitar.']
    """
    result = []
    for char_starts, char_ends, _ in text_units(tokenizer, list(texts), unit):
        starts, ends = span_grid(len(char_starts), min_span, max_span)
        result.append(
            np.stack([char_starts[starts.numpy()], char_ends[ends.numpy() - 1]], axis=1).astype(np.int64).reshape(-1, 2)
        )
    return result


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


def score_ngram(
    model: SentenceTransformer,
    phrases: Sequence[str],
    passages: Sequence[str],
    *,
    min_span: int = 1,
    max_span: int = 20,
    unit: str = "word",
    batch_size: int = 32,
    show_progress_bar: bool | None = None,
) -> SetupResult:
    """Per-n-gram setup: every n-gram of each passage encoded as its own input; best cosine per pair.

    N·K forward passes (batched, deduplicated within a call of :data:`NGRAMS_PER_CALL` n-grams; an
    n-gram is encoded exactly like a sentence, through ``model.encode``).

    Args:
        model: A ``SentenceTransformer``.
        phrases: Origin phrase of each pair.
        passages: Passage of each pair.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"``.
        batch_size: Batch size of the forward passes.
        show_progress_bar: Show a progress bar (``None``: for long inputs).

    Returns:
        A :class:`SetupResult` with the best cosine and span per pair.

    Example:
        >>> from slice_st import load_model
        >>> result = score_ngram(load_model(), ["a dog"], ["The cat and the puppy slept."], max_span=3)
        >>> "The cat and the puppy slept."[slice(*result.spans[0])]
        'the puppy'
    """
    phrases, passages = check_inputs(phrases, passages)
    offsets = ngram_offsets(model.tokenizer, passages, min_span, max_span, unit)
    queries = _encode(model, phrases, batch_size, False)
    total = sum(len(o) for o in offsets)
    scores = np.full(len(passages), -np.inf)
    best: list[tuple[int, int] | None] = [None] * len(passages)
    if show_progress_bar is None:
        show_progress_bar = total > 4 * NGRAMS_PER_CALL
    with tqdm(total=total, desc="Encoding n-grams", unit="n-gram", disable=not show_progress_bar) as progress:
        pending: list[int] = []
        pending_size = 0

        def flush() -> None:
            strings = [passages[i][s:e] for i in pending for s, e in offsets[i]]
            unique = list(dict.fromkeys(strings))
            position = {text: k for k, text in enumerate(unique)}
            vectors = _encode(model, unique, batch_size, False)
            cursor = 0
            for i in pending:
                count = len(offsets[i])
                rows = torch.tensor([position[t] for t in strings[cursor : cursor + count]], device=vectors.device)
                cosines = vectors[rows] @ queries[i]
                top = int(torch.argmax(cosines))
                scores[i] = float(cosines[top])
                best[i] = (int(offsets[i][top, 0]), int(offsets[i][top, 1]))
                cursor += count
            progress.update(len(strings))

        for index, passage_offsets in enumerate(offsets):
            if len(passage_offsets) == 0:
                continue
            pending.append(index)
            pending_size += len(passage_offsets)
            if pending_size >= NGRAMS_PER_CALL:
                flush()
                pending, pending_size = [], 0
        if pending:
            flush()
    check_all_scored(scores, passages)
    return SetupResult(scores, best, extra={"ngrams": total})


def check_all_scored(scores: np.ndarray, passages: list[str]) -> None:
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
    """Single-pass setup (SLICE): one forward pass per passage, best mean-pooled span per pair.

    Goes through :func:`slice_st.encode.best_spans_paired` (the span core's fused scoring); ``scorer`` decides
    the best span and gives its score (:mod:`slice_st.scoring`; default ``"phrase"``, ``"max-cosine"`` is
    the paper's protocol). ``extra["similarities"]`` lists the best spans' plain cosines.

    Args:
        model: A ``SentenceTransformer``.
        phrases: Origin phrase of each pair.
        passages: Passage of each pair.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"``.
        batch_size: Batch size of the forward passes.
        show_progress_bar: Show a progress bar (``None``: for long inputs).

    Returns:
        A :class:`SetupResult` with the best cosine and span per pair.

    Example:
        >>> from slice_st import load_model
        >>> score_single(load_model(), ["a dog"], ["The cat and the puppy slept."], max_span=3).spans
        [(12, 21)]
    """
    phrases, passages = check_inputs(phrases, passages)
    matches = best_spans_paired(
        model,
        phrases,
        passages,
        min_span=min_span,
        max_span=max_span,
        unit=unit,
        batch_size=batch_size,
        show_progress_bar=show_progress_bar,
        scorer=scorer,
    )
    scores = np.array([match.score if match is not None else -np.inf for match in matches], dtype=np.float64)
    check_all_scored(scores, passages)
    similarities = [float(match.similarity) for match in matches]  # JSON-ready: the table caches extras
    return SetupResult(
        scores,
        [(match.start, match.end) for match in matches],
        extra={"scorer": resolve_scorer(scorer).name, "similarities": similarities},
    )


SCORERS = {"full": score_full, "ngram": score_ngram, "single": score_single}
