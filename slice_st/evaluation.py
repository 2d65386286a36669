"""Span retrieval evaluation (STS-B-Context, Orbach et al., 2024) and the Williams significance test.

A pair is an origin phrase and a passage that contains a paraphrase of it somewhere; its predicted
score is the similarity of the phrase to the passage, and a system is judged by Pearson and Spearman
correlation with the gold 0-5 scores. Three setups (Table 1 of the paper):

* ``full``: one vector per passage (``model.encode``), cosine to the phrase's vector;
* ``ngram``: every ``min_span..max_span``-unit n-gram of the passage encoded **on its own**
  (``model.encode``, one input per n-gram: N·K forward passes); the best cosine wins;
* ``single``: one forward pass per passage, every span mean-pooled from its token vectors
  (:func:`slice_st.best_spans_paired`); the best cosine wins.

Units are those of the span core (:mod:`slice_st.tokens`): a word is a whitespace-delimited word for
the usual tokenizers, so n-grams and single-pass spans are the same character ranges.
"""

from __future__ import annotations

import csv
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from scipy import stats
from sentence_transformers.base.evaluation import BaseEvaluator
from tqdm.auto import tqdm

from slice_st.spans import span_grid
from slice_st.tokens import check_unit, text_units

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = [
    "SETUPS",
    "SetupResult",
    "SpanRetrievalEvaluator",
    "correlations",
    "ngram_offsets",
    "score_full",
    "score_ngram",
    "score_single",
    "williams_test",
    "compare_to_best",
]

logger = logging.getLogger(__name__)

SETUPS = ("full", "ngram", "single")
#: n-grams sent to one ``model.encode`` call in the per-n-gram setup (bounds memory).
NGRAMS_PER_CALL = 8192


@dataclass
class SetupResult:
    """Predicted scores of one system in one setup: ``scores`` ``(N,)`` and, for span setups, the
    best span of each passage as character offsets ``spans[i] = (start, end)`` (``None`` for none)."""

    scores: np.ndarray
    spans: list[tuple[int, int] | None] | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def correlations(gold: Sequence[float], predicted: Sequence[float]) -> tuple[float, float]:
    """Pearson and Spearman correlation of ``predicted`` with ``gold``.

    >>> correlations([0, 1, 2, 3], [0.1, 0.2, 0.25, 0.9])  # doctest: +ELLIPSIS
    (0.8696..., 1.0)
    """
    gold_array, predicted_array = np.asarray(gold, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    if len(gold_array) < 3 or np.ptp(predicted_array) == 0 or np.ptp(gold_array) == 0:
        return float("nan"), float("nan")
    return float(stats.pearsonr(gold_array, predicted_array)[0]), float(stats.spearmanr(gold_array, predicted_array)[0])


# --------------------------------------------------------------------------------------- Williams
def williams_test(r12: float, r13: float, r23: float, n: int) -> float:
    """One-sided p-value that ``r12 > r13`` for two dependent correlations sharing variable 1.

    Williams (1959) as used by Graham & Baldwin (2014) for comparing evaluation metrics: variable 1
    is the gold score, 2 and 3 are two systems' predictions, ``r23`` their correlation with each
    other, ``n`` the number of pairs. Small p: system 2 correlates significantly better than 3.

    >>> round(williams_test(0.80, 0.70, 0.75, 1000), 6) < 0.001
    True
    >>> round(williams_test(0.70, 0.70, 0.9, 100), 3)
    0.5
    """
    if n <= 3:
        raise ValueError(f"the Williams test needs n > 3 pairs, got {n}.")
    k = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    denominator = math.sqrt(max(2 * k * (n - 1) / (n - 3) + ((r12 + r13) ** 2 / 4) * (1 - r23) ** 3, 1e-300))
    t_value = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)) / denominator
    return float(stats.t.sf(t_value, df=n - 3))


def compare_to_best(gold: Sequence[float], predictions: dict[str, Sequence[float]], method: str = "pearson") -> dict[str, float]:
    """Williams p-value of each system against the best one (by ``method`` correlation with ``gold``).

    The best system gets ``nan``. Spearman uses the same test on ranks.

    >>> gold = np.arange(50.0)
    >>> p = compare_to_best(gold, {"good": gold + np.sin(gold), "bad": gold[::-1] * 0 + np.cos(gold)})
    >>> math.isnan(p["good"]), p["bad"] < 0.01
    (True, True)
    """
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method must be 'pearson' or 'spearman', got {method!r}.")
    gold_values = np.asarray(gold, dtype=np.float64)
    series = {name: np.asarray(values, dtype=np.float64) for name, values in predictions.items()}
    if method == "spearman":
        gold_values = stats.rankdata(gold_values)
        series = {name: stats.rankdata(values) for name, values in series.items()}

    def corr(a: np.ndarray, b: np.ndarray) -> float:
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            return 0.0
        return float(np.corrcoef(a, b)[0, 1])

    with_gold = {name: corr(gold_values, values) for name, values in series.items()}
    best = max(with_gold, key=lambda name: with_gold[name])
    result = {}
    for name, values in series.items():
        if name == best:
            result[name] = float("nan")
        else:
            result[name] = williams_test(with_gold[best], with_gold[name], corr(series[best], values), len(gold_values))
    return result


# ------------------------------------------------------------------------------------------ setups
def _check_inputs(phrases: Sequence[str], passages: Sequence[str]) -> tuple[list[str], list[str]]:
    phrases, passages = list(phrases), list(passages)
    if len(phrases) != len(passages):
        raise ValueError(f"phrases and passages must pair up: got {len(phrases)} phrases and {len(passages)} passages.")
    for what, values in (("phrases", phrases), ("passages", passages)):
        for index, value in enumerate(values):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{what}[{index}] is empty or not a string: {value!r:.60}.")
    return phrases, passages


def ngram_offsets(tokenizer, texts: Sequence[str], min_span: int = 1, max_span: int = 20, unit: str = "word") -> list[np.ndarray]:
    """Character offsets ``(S, 2)`` of every ``min_span..max_span``-unit n-gram of each text, start-major.

    Units come from :func:`slice_st.tokens.text_units` (the span core's definition), and n-grams from :func:`slice_st.spans.span_grid`, so they are exactly the
    spans :func:`slice_st.encode_spans` produces.

    >>> from transformers import AutoTokenizer
    >>> from slice_st import default_model_path
    >>> tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    >>> text = "A man's guitar."
    >>> [text[s:e] for s, e in ngram_offsets(tokenizer, [text], 1, 2)[0]]
    ['A', "A man's", "man's", "man's guitar.", 'guitar.']
    """
    result = []
    for char_starts, char_ends, _ in text_units(tokenizer, list(texts), unit):
        starts, ends = span_grid(len(char_starts), min_span, max_span)
        result.append(np.stack([char_starts[starts.numpy()], char_ends[ends.numpy() - 1]], axis=1).astype(np.int64).reshape(-1, 2))
    return result


def _encode(model, texts: list[str], batch_size: int, show_progress_bar: bool) -> torch.Tensor:
    vectors = model.encode(texts, batch_size=batch_size, show_progress_bar=show_progress_bar, convert_to_tensor=True)
    return torch.nn.functional.normalize(vectors.float(), dim=-1)


def score_full(model: SentenceTransformer, phrases: Sequence[str], passages: Sequence[str], *, batch_size: int = 32,
               show_progress_bar: bool = False) -> SetupResult:
    """Full-context setup: cosine of ``model.encode(phrase)`` and ``model.encode(passage)`` per pair.

    >>> from slice_st import load_model
    >>> result = score_full(load_model(), ["a dog"], ["A puppy slept on the porch."])
    >>> result.scores.shape
    (1,)
    """
    phrases, passages = _check_inputs(phrases, passages)
    queries = _encode(model, phrases, batch_size, show_progress_bar)
    documents = _encode(model, passages, batch_size, show_progress_bar)
    return SetupResult((queries * documents).sum(-1).cpu().numpy().astype(np.float64))


def score_ngram(model: SentenceTransformer, phrases: Sequence[str], passages: Sequence[str], *, min_span: int = 1,
                max_span: int = 20, unit: str = "word", batch_size: int = 32, show_progress_bar: bool | None = None) -> SetupResult:
    """Per-n-gram setup: every n-gram of each passage encoded as its own input; best cosine per pair.

    N·K forward passes (batched, deduplicated within a call of :data:`NGRAMS_PER_CALL` n-grams; an
    n-gram is encoded exactly like a sentence, through ``model.encode``).

    >>> from slice_st import load_model
    >>> result = score_ngram(load_model(), ["a dog"], ["The cat and the puppy slept."], max_span=3)
    >>> "The cat and the puppy slept."[slice(*result.spans[0])]
    'the puppy'
    """
    phrases, passages = _check_inputs(phrases, passages)
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
    _check_all_scored(scores, passages)
    return SetupResult(scores, best, extra={"ngrams": total})


def _check_all_scored(scores: np.ndarray, passages: list[str]) -> None:
    missing = np.flatnonzero(~np.isfinite(scores))
    if len(missing):
        raise ValueError(f"passages[{int(missing[0])}] has no span to score (no tokens?): {passages[int(missing[0])]!r:.60}.")


def score_single(model: SentenceTransformer, phrases: Sequence[str], passages: Sequence[str], *, min_span: int = 1,
                 max_span: int = 20, unit: str = "word", batch_size: int = 32, show_progress_bar: bool | None = None) -> SetupResult:
    """Single-pass setup (SLICE): one forward pass per passage, best mean-pooled span per pair.

    Goes through :func:`slice_st.best_spans_paired` (the span core's fused scoring).

    >>> from slice_st import load_model
    >>> score_single(load_model(), ["a dog"], ["The cat and the puppy slept."], max_span=3).spans
    [(12, 21)]
    """
    from slice_st.encode import best_spans_paired

    phrases, passages = _check_inputs(phrases, passages)
    matches = best_spans_paired(model, phrases, passages, min_span=min_span, max_span=max_span, unit=unit,
                                batch_size=batch_size, show_progress_bar=show_progress_bar)
    scores = np.array([match.score if match is not None else -np.inf for match in matches], dtype=np.float64)
    _check_all_scored(scores, passages)
    return SetupResult(scores, [(match.start, match.end) for match in matches])


SCORERS = {"full": score_full, "ngram": score_ngram, "single": score_single}


# --------------------------------------------------------------------------------------- evaluator
class SpanRetrievalEvaluator(BaseEvaluator):
    """Sentence-transformers evaluator for phrase-in-context similarity (STS-B-Context).

    For each pair (origin phrase, passage, gold score) it predicts a similarity in each setup of
    ``setups`` (``"full"``, ``"ngram"``, ``"single"``; see :mod:`slice_st.evaluation`) and reports
    ``{setup}_pearson`` and ``{setup}_spearman``. The primary metric is ``single_spearman`` (else
    the Spearman of the last setup). Works as ``evaluator=`` of ``SentenceTransformerTrainer`` and
    records its metrics in the model card data. With ``output_path`` it appends the metrics to
    ``span_retrieval_evaluation[_name]_results.csv`` and, with ``write_predictions=True``, writes the
    best span and score of every pair and setup to ``span_retrieval_predictions[_name].csv``.

    >>> from slice_st import load_model
    >>> evaluator = SpanRetrievalEvaluator(
    ...     ["a man plays guitar", "a dog runs", "the stock market fell", "a woman cooks"],
    ...     ["Late again. A man is playing a guitar on stage. The crowd cheered.",
    ...      "It rained all day. A cat sleeps on the sofa. Nobody came.",
    ...      "Prices rose. Shares dropped sharply on Monday. Traders left early.",
    ...      "The bus was late. A lady is preparing food. It smelled good."],
    ...     [4.8, 1.0, 3.9, 4.2], setups=("full", "single"), max_span=10)
    >>> metrics = evaluator(load_model())
    >>> sorted(metrics), evaluator.primary_metric
    (['full_pearson', 'full_spearman', 'single_pearson', 'single_spearman'], 'single_spearman')
    """

    def __init__(
        self,
        phrases: Sequence[str],
        passages: Sequence[str],
        scores: Sequence[float],
        *,
        setups: Sequence[str] = SETUPS,
        min_span: int = 1,
        max_span: int = 20,
        unit: str = "word",
        batch_size: int = 32,
        name: str = "",
        show_progress_bar: bool | None = None,
        write_csv: bool = True,
        write_predictions: bool = False,
    ):
        super().__init__()
        from slice_st.spans import check_span_bounds

        self.phrases, self.passages = _check_inputs(phrases, passages)
        self.scores = [float(score) for score in scores]
        if len(self.scores) != len(self.phrases):
            raise ValueError(f"got {len(self.scores)} gold scores for {len(self.phrases)} pairs.")
        if len(self.scores) < 3:
            raise ValueError("need at least 3 pairs to compute correlations.")
        setups = tuple(setups)
        unknown = [s for s in setups if s not in SETUPS]
        if unknown or not setups:
            raise ValueError(f"setups must be a non-empty subset of {SETUPS}, got {list(setups)}.")
        check_span_bounds(min_span, max_span)
        self.setups = setups
        self.min_span, self.max_span, self.unit = min_span, max_span, check_unit(unit)
        self.batch_size = batch_size
        self.name = name
        self.show_progress_bar = show_progress_bar
        self.write_csv = write_csv
        self.write_predictions = write_predictions
        self.primary_metric = "single_spearman" if "single" in setups else f"{setups[-1]}_spearman"
        suffix = f"_{name}" if name else ""
        self.csv_file = f"span_retrieval_evaluation{suffix}_results.csv"
        self.predictions_file = f"span_retrieval_predictions{suffix}.csv"
        self.csv_headers = ["epoch", "steps"] + [f"{s}_{m}" for s in setups for m in ("pearson", "spearman")]
        self.last_results: dict[str, SetupResult] = {}

    @classmethod
    def from_dataset(cls, dataset, **kwargs: Any) -> SpanRetrievalEvaluator:
        """From rows with ``line``, ``passage`` and ``goldsim`` (e.g. :func:`slice_st.data.read_stsb_context`)."""
        return cls(dataset["line"], dataset["passage"], dataset["goldsim"], **kwargs)

    def predict(self, model: SentenceTransformer) -> dict[str, SetupResult]:
        """Predicted scores (and best spans) of ``model`` in every setup."""
        import time

        results = {}
        for setup in self.setups:
            start = time.perf_counter()
            kwargs: dict[str, Any] = {"batch_size": self.batch_size}
            if setup != "full":
                kwargs |= {"min_span": self.min_span, "max_span": self.max_span, "unit": self.unit}
                kwargs["show_progress_bar"] = self.show_progress_bar
            else:
                kwargs["show_progress_bar"] = bool(self.show_progress_bar)
            result = SCORERS[setup](model, self.phrases, self.passages, **kwargs)
            result.seconds = time.perf_counter() - start
            results[setup] = result
        return results

    def __call__(self, model: SentenceTransformer, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        where = f" after epoch {epoch}" if epoch != -1 else ""
        where += f" ({steps} steps)" if steps != -1 else ""
        logger.info(f"SpanRetrievalEvaluator: evaluating on {self.name or 'the data'}{where}")
        results = self.predict(model)
        self.last_results = results
        metrics: dict[str, float] = {}
        for setup, result in results.items():
            pearson, spearman = correlations(self.scores, result.scores)
            metrics[f"{setup}_pearson"], metrics[f"{setup}_spearman"] = pearson, spearman
            logger.info(f"{setup:>6}: Pearson {pearson:.4f}  Spearman {spearman:.4f}  ({result.seconds:.1f} s)")
        if output_path is not None and self.write_csv:
            os.makedirs(output_path, exist_ok=True)
            path = os.path.join(output_path, self.csv_file)
            exists = os.path.isfile(path)
            with open(path, "a" if exists else "w", newline="", encoding="utf-8") as handle:
                writer = csv.writer(handle)
                if not exists:
                    writer.writerow(self.csv_headers)
                writer.writerow([epoch, steps] + [metrics[header] for header in self.csv_headers[2:]])
        if output_path is not None and self.write_predictions:
            self.save_predictions(os.path.join(output_path, self.predictions_file), results)
        self.primary_metric = "single_spearman" if "single" in self.setups else f"{self.setups[-1]}_spearman"
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def save_predictions(self, path: str, results: dict[str, SetupResult] | None = None) -> str:
        """Write one CSV row per pair and setup: gold, predicted score, best span (offsets and text)."""
        results = results if results is not None else self.last_results
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["pair", "setup", "gold", "score", "start", "end", "span", "phrase"])
            for setup, result in results.items():
                for index, score in enumerate(result.scores):
                    span = result.spans[index] if result.spans else None
                    start, end = span if span else ("", "")
                    text = self.passages[index][span[0] : span[1]] if span else ""
                    writer.writerow([index, setup, self.scores[index], f"{score:.6f}", start, end, text, self.phrases[index]])
        return path

    @property
    def description(self) -> str:
        return "Span Retrieval"

    def get_config_dict(self) -> dict[str, Any]:
        return {"setups": list(self.setups), "min_span": self.min_span, "max_span": self.max_span, "unit": self.unit}
