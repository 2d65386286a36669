"""``SpanRetrievalEvaluator``: a sentence-transformers evaluator for phrase-in-context similarity (STS-B-Context)."""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sentence_transformers.base.evaluation import BaseEvaluator

from slice_st.evaluation.localisation import STRONG_GOLD, span_localisation
from slice_st.evaluation.setups import SETUPS, SetupResult, check_inputs, score_full, score_single
from slice_st.evaluation.statistics import correlations
from slice_st.scoring import SpanScorer, resolve_scorer
from slice_st.spans import check_span_bounds
from slice_st.text import append_csv_row
from slice_st.tokens import check_unit

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)


class SpanRetrievalEvaluator(BaseEvaluator):
    """Sentence-transformers evaluator for phrase-in-context similarity (STS-B-Context).

    For each pair (origin phrase, passage, gold score) it predicts a similarity in each of ``setups`` (``"full"``:
    one vector per passage; ``"single"``: the best span of one forward pass, chosen by ``scorer``) and reports
    ``{setup}_pearson`` and ``{setup}_spearman``; the primary metric is ``single_spearman``. With ``paraphrases``
    it also reports where the best span lands: ``single_exact``, ``single_word_f1`` and, on pairs with gold >= 3,
    ``single_strong_exact`` / ``single_strong_word_f1``. It works as ``evaluator=`` of
    ``SentenceTransformerTrainer`` and records its metrics in the model card data. With ``output_path`` it appends
    the metrics to ``span_retrieval_evaluation[_name]_results.csv`` and, with ``write_predictions=True``, writes
    every pair's best span and score to ``span_retrieval_predictions[_name].csv``.

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
        self.scorer = resolve_scorer(scorer)
        if paraphrases is not None:
            paraphrases = [str(p) for p in paraphrases]
            if len(paraphrases) != len(self.phrases):
                raise ValueError(f"got {len(paraphrases)} paraphrases for {len(self.phrases)} pairs.")
        self.paraphrases = paraphrases
        suffix = f"_{name}" if name else ""
        self.csv_file = f"span_retrieval_evaluation{suffix}_results.csv"
        self.predictions_file = f"span_retrieval_predictions{suffix}.csv"
        self.csv_headers = ["epoch", "steps"] + [f"{s}_{m}" for s in setups for m in self._metric_names(s)]
        self.last_results: dict[str, SetupResult] = {}

    def _metric_names(self, setup: str) -> tuple[str, ...]:
        if self.paraphrases is None or setup == "full":
            return ("pearson", "spearman")
        return ("pearson", "spearman", "exact", "word_f1", "strong_exact", "strong_word_f1")

    @classmethod
    def from_dataset(cls, dataset, **kwargs: Any) -> SpanRetrievalEvaluator:
        """From rows with ``line``, ``passage`` and ``goldsim`` (e.g. :func:`slice_st.data.read_stsb_context`);
        a ``paraphrase`` column turns the localisation metrics on."""
        if "paraphrase" in getattr(dataset, "column_names", ()) and "paraphrases" not in kwargs:
            kwargs["paraphrases"] = dataset["paraphrase"]
        return cls(dataset["line"], dataset["passage"], dataset["goldsim"], **kwargs)

    def predict(self, model: SentenceTransformer) -> dict[str, SetupResult]:
        """Predicted scores (and best spans) of ``model`` in every setup."""
        import time

        single = {"min_span": self.min_span, "max_span": self.max_span, "unit": self.unit, "scorer": self.scorer}
        single |= {"batch_size": self.batch_size, "show_progress_bar": self.show_progress_bar}
        results = {}
        for setup in self.setups:
            start = time.perf_counter()
            if setup == "full":
                result = score_full(model, self.phrases, self.passages, batch_size=self.batch_size)
            else:
                result = score_single(model, self.phrases, self.passages, **single)
            result.seconds = time.perf_counter() - start
            results[setup] = result
        return results

    def __call__(
        self, model: SentenceTransformer, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
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
            if self.paraphrases is not None and result.spans is not None:
                where = span_localisation(self.passages, result.spans, self.paraphrases, self.scores, STRONG_GOLD)
                for name in ("exact", "word_f1", "strong_exact", "strong_word_f1"):
                    metrics[f"{setup}_{name}"] = where[name]
                logger.info(
                    f"{setup:>6}: exact {where['exact']:.1f}  word-F1 {where['word_f1']:.1f} on {where['located']} "
                    f"rows; "
                    f"gold >= {STRONG_GOLD:g}: exact {where['strong_exact']:.1f}  word-F1 {where['strong_word_f1']:.1f}"
                )
        if output_path is not None and self.write_csv:
            row = [epoch, steps] + [metrics[header] for header in self.csv_headers[2:]]
            append_csv_row(output_path, self.csv_file, self.csv_headers, row)
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
                    writer.writerow(
                        [index, setup, self.scores[index], f"{score:.6f}", start, end, text, self.phrases[index]]
                    )
        return path

    @property
    def description(self) -> str:
        return "Span Retrieval"

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "setups": list(self.setups),
            "min_span": self.min_span,
            "max_span": self.max_span,
            "unit": self.unit,
            "scorer": self.scorer.name,
        }
