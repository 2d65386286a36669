"""``SpanRetrievalEvaluator``: phrase-in-context similarity (STS-B-Context) in two setups, ``full`` (one vector per
passage) and ``single`` (the best span of one forward pass); the paper's per-n-gram one is in ``research/``."""

from __future__ import annotations

import csv
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sentence_transformers.base.evaluation import BaseEvaluator

from slice_st._extras import needs_extra
from slice_st.evaluation.localisation import LOCALISATION_METRICS, span_localisation
from slice_st.files import append_csv_row
from slice_st.scoring import SpanScorer, resolve_scorer
from slice_st.search import best_spans_paired
from slice_st.spans import check_span_bounds
from slice_st.tokens import check_unit

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

SETUPS = ("full", "single")


@dataclass
class SetupResult:
    """Predicted scores of one setup.

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


def correlations(gold: Sequence[float], predicted: Sequence[float]) -> tuple[float, float]:
    """Pearson and Spearman correlation of ``predicted`` with ``gold``.

    Args:
        gold: Gold scores.
        predicted: Predicted scores.

    Returns:
        ``(pearson, spearman)``; ``nan`` for fewer than 3 pairs or a constant side.

    Example:
        >>> correlations([0, 1, 2, 3], [0.1, 0.2, 0.25, 0.9])  # doctest: +ELLIPSIS
        (0.8696..., 1.0)
    """
    with needs_extra("eval", "correlations"):
        from scipy import stats
    gold_array = np.asarray(gold, dtype=np.float64)
    predicted_array = np.asarray(predicted, dtype=np.float64)
    if len(gold_array) < 3 or np.ptp(predicted_array) == 0 or np.ptp(gold_array) == 0:
        return float("nan"), float("nan")
    pearson = stats.pearsonr(gold_array, predicted_array)[0]
    return float(pearson), float(stats.spearmanr(gold_array, predicted_array)[0])


def check_inputs(phrases: Sequence[str], passages: Sequence[str]) -> tuple[list[str], list[str]]:
    """The pairs as lists, checked: as many phrases as passages, none empty."""
    phrases, passages = list(phrases), list(passages)
    if len(phrases) != len(passages):
        raise ValueError(
            f"phrases and passages must pair up: got {len(phrases)} phrases and {len(passages)} passages."
        )
    for what, values in (("phrases", phrases), ("passages", passages)):
        for index, value in enumerate(values):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{what}[{index}] is empty or not a string: {value!r:.60}.")
    return phrases, passages


def check_all_scored(scores: np.ndarray, passages: list[str]) -> None:
    """Refuse a passage without a span to score (no tokens)."""
    if len(missing := np.flatnonzero(~np.isfinite(scores))):
        raise ValueError(
            f"passages[{missing[0]}] has no span to score (no tokens?): {passages[missing[0]]!r:.60}."
        )


def score_full(
    model: SentenceTransformer,
    phrases: Sequence[str],
    passages: Sequence[str],
    *,
    batch_size: int = 32,
    show_progress_bar: bool = False,
) -> SetupResult:
    """Full-context setup: the cosine of ``model.encode(phrase)`` and ``model.encode(passage)`` per pair.

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
        >>> score_full(load_model(), ["a dog"], ["A puppy slept on the porch."]).scores.shape
        (1,)
    """
    phrases, passages = check_inputs(phrases, passages)
    encode = {"batch_size": batch_size, "show_progress_bar": show_progress_bar}
    encode |= {"convert_to_tensor": True, "normalize_embeddings": True}
    queries, documents = (model.encode(texts, **encode).float() for texts in (phrases, passages))
    return SetupResult((queries * documents).sum(-1).cpu().numpy().astype(np.float64))


def score_single(
    model: SentenceTransformer,
    phrases: Sequence[str],
    passages: Sequence[str],
    *,
    min_span=1,
    max_span=20,
    unit="word",
    **options: Any,
) -> SetupResult:
    """Single-pass setup (SLICE): one forward pass per passage, the best span per pair.

    Args:
        model: A ``SentenceTransformer``.
        phrases: Origin phrase of each pair.
        passages: Passage of each pair.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"``.
        options: More :func:`slice_st.search.best_spans_paired` arguments: ``batch_size``, ``show_progress_bar``,
            ``scorer`` (which span wins and its score; ``"max-cosine"`` is the paper's protocol).

    Returns:
        A :class:`SetupResult` with the best span and its score per pair; ``extra["similarities"]``: their cosines.

    Example:
        >>> from slice_st import load_model
        >>> score_single(load_model(), ["a dog"], ["The cat and the puppy slept."], max_span=3).spans
        [(12, 21)]
    """
    phrases, passages = check_inputs(phrases, passages)
    matches = best_spans_paired(
        model, phrases, passages, min_span=min_span, max_span=max_span, unit=unit, **options
    )
    scores = np.array(
        [match.score if match is not None else -np.inf for match in matches], dtype=np.float64
    )
    check_all_scored(scores, passages)
    extra = {"scorer": resolve_scorer(options.get("scorer")).name}
    # JSON-ready: research's table caches it
    extra["similarities"] = [float(match.similarity) for match in matches]
    return SetupResult(scores, [(match.start, match.end) for match in matches], extra=extra)


class SpanRetrievalEvaluator(BaseEvaluator):
    """Sentence-transformers evaluator for phrase-in-context similarity (STS-B-Context).

    Each pair (origin phrase, passage, gold score) is scored in each of ``setups`` (``"full"``: one vector per
    passage; ``"single"``: the best span of one forward pass) for ``{setup}_pearson`` and ``{setup}_spearman``
    (primary: ``single_spearman``); with ``paraphrases``, also where the best span lands (``single_exact``,
    ``single_word_f1``, and ``single_strong_*`` on pairs with gold >= 3). It works as the trainer's ``evaluator=``
    (metrics in the model card data) and appends to ``span_retrieval_evaluation[_name]_results.csv`` in
    ``output_path`` (predictions: ``span_retrieval_predictions[_name].csv``).

    Args:
        phrases: Origin phrase of each pair.
        passages: Passage of each pair (it holds a paraphrase).
        scores: Gold similarity of each pair (0–5).
        setups: ``"full"`` and/or ``"single"``.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"``.
        batch_size: Batch size of the forward passes.
        name: Suffix of the metric names and the CSV files.
        show_progress_bar: Show progress bars (``None``: for long inputs).
        write_csv: Append the metrics to a CSV file when called with ``output_path``.
        write_predictions: Also write every pair's best span and score.
        paraphrases: The paraphrase each passage holds (turns the localisation metrics on).
        scorer: How the single pass picks the best span (:mod:`slice_st.scoring`; ``"max-cosine"``: the paper's).

    Example:
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
        paraphrases: Sequence[str] | None = None,
        scorer: str | SpanScorer | None = None,
    ):
        super().__init__()
        self.phrases, self.passages = check_inputs(phrases, passages)
        self.scores = [float(score) for score in scores]
        if len(self.scores) != len(self.phrases):
            raise ValueError(f"got {len(self.scores)} gold scores for {len(self.phrases)} pairs.")
        if len(self.scores) < 3:
            raise ValueError("need at least 3 pairs to compute correlations.")
        self.setups = tuple(setups)
        if not self.setups or any(setup not in SETUPS for setup in self.setups):
            raise ValueError(
                f"setups must be a non-empty subset of {SETUPS}, got {list(self.setups)}."
            )
        check_span_bounds(min_span, max_span)
        self.min_span, self.max_span, self.unit = min_span, max_span, check_unit(unit)
        self.batch_size, self.name, self.show_progress_bar = batch_size, name, show_progress_bar
        self.write_csv, self.write_predictions = write_csv, write_predictions
        self.scorer = resolve_scorer(scorer)
        self.paraphrases = None if paraphrases is None else [str(p) for p in paraphrases]
        if self.paraphrases is not None and len(self.paraphrases) != len(self.phrases):
            raise ValueError(
                f"got {len(self.paraphrases)} paraphrases for {len(self.phrases)} pairs."
            )
        suffix = f"_{name}" if name else ""
        self.csv_file = f"span_retrieval_evaluation{suffix}_results.csv"
        self.predictions_file = f"span_retrieval_predictions{suffix}.csv"
        located = () if self.paraphrases is None else LOCALISATION_METRICS
        self.csv_headers = ["epoch", "steps"]
        for setup in self.setups:
            metrics = ("pearson", "spearman", *(located if setup == "single" else ()))
            self.csv_headers += [f"{setup}_{metric}" for metric in metrics]
        # prefix_name_to_metrics adds the name once, at the first call
        self.primary_metric = (
            "single_spearman" if "single" in self.setups else f"{self.setups[-1]}_spearman"
        )
        self.last_results: dict[str, SetupResult] = {}

    @classmethod
    def from_dataset(cls, dataset, **kwargs: Any) -> SpanRetrievalEvaluator:
        """From ``line``, ``passage``, ``goldsim`` (and ``paraphrase``) columns, as ``read_stsb_context`` gives."""
        if "paraphrase" in getattr(dataset, "column_names", ()) and "paraphrases" not in kwargs:
            kwargs["paraphrases"] = dataset["paraphrase"]
        return cls(dataset["line"], dataset["passage"], dataset["goldsim"], **kwargs)

    def predict(self, model: SentenceTransformer) -> dict[str, SetupResult]:
        """Predicted scores (and best spans) of ``model`` in every setup."""
        single = {"min_span": self.min_span, "max_span": self.max_span, "unit": self.unit}
        single |= {"batch_size": self.batch_size, "show_progress_bar": self.show_progress_bar}
        single["scorer"] = self.scorer
        results = {}
        for setup in self.setups:
            start = time.perf_counter()
            if setup == "full":
                results[setup] = score_full(
                    model, self.phrases, self.passages, batch_size=self.batch_size
                )
            else:
                results[setup] = score_single(model, self.phrases, self.passages, **single)
            results[setup].seconds = time.perf_counter() - start
        return results

    def __call__(
        self,
        model: SentenceTransformer,
        output_path: str | None = None,
        epoch: int = -1,
        steps: int = -1,
    ) -> dict[str, float]:
        logger.info(
            f"SpanRetrievalEvaluator: evaluating on {self.name or 'the data'} (epoch {epoch}, step {steps})"
        )
        self.last_results = results = self.predict(model)
        metrics: dict[str, float] = {}
        for setup, result in results.items():
            pearson, spearman = correlations(self.scores, result.scores)
            metrics[f"{setup}_pearson"], metrics[f"{setup}_spearman"] = pearson, spearman
            logger.info(
                f"{setup:>6}: Pearson {pearson:.4f}  Spearman {spearman:.4f}  ({result.seconds:.1f} s)"
            )
            if self.paraphrases is not None and result.spans is not None:
                found = span_localisation(
                    self.passages, result.spans, self.paraphrases, self.scores
                )
                metrics |= {f"{setup}_{name}": found[name] for name in LOCALISATION_METRICS}
                located = f"exact {found['exact']:.1f}  word-F1 {found['word_f1']:.1f} on {found['located']} rows"
                logger.info(f"{setup:>6}: {located}")
        if output_path is not None and self.write_csv:
            row = [epoch, steps] + [metrics[header] for header in self.csv_headers[2:]]
            append_csv_row(output_path, self.csv_file, self.csv_headers, row)
        if output_path is not None and self.write_predictions:
            self.save_predictions(os.path.join(output_path, self.predictions_file), results)
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def save_predictions(self, path: str, results: dict[str, SetupResult] | None = None) -> str:
        """Write one CSV row per pair and setup: gold, predicted score, best span (offsets and text)."""
        results = results if results is not None else self.last_results
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["pair", "setup", "gold", "score", "start", "end", "span", "phrase"])
            for setup, result in results.items():
                for index, score in enumerate(result.scores):
                    span = result.spans[index] if result.spans else None
                    start, end = span or ("", "")
                    text = self.passages[index][start:end] if span else ""
                    gold, phrase = self.scores[index], self.phrases[index]
                    writer.writerow([index, setup, gold, f"{score:.6f}", start, end, text, phrase])
        return path

    @property
    def description(self) -> str:
        return "Span Retrieval"

    def get_config_dict(self) -> dict[str, Any]:
        spans = {"min_span": self.min_span, "max_span": self.max_span, "unit": self.unit}
        return {"setups": list(self.setups), **spans, "scorer": self.scorer.name}
