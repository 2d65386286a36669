"""PEARL's phrase tasks (Chen et al., 2024) as sentence-transformers evaluators.

A SLICE model's query side is a phrase encoder; these tasks measure it the way PEARL's evaluation
code does (``tigerchen52/PEARL``, ``evaluation/eval.py``):

* :class:`BirdEvaluator`: Pearson (and Spearman) correlation of the cosine of two phrases with BIRD's
  relatedness score;
* :class:`TurneyEvaluator`: accuracy of picking the answer as the candidate closest (cosine) to the
  bigram, among the answer and the distractors (PEARL leaves out the bigram's own two words);
* :class:`PairClassificationEvaluator` (PPDB, PPDB-filtered): accuracy of a probe, a one-hidden-layer
  MLP (256 ReLU units, sigmoid output, Adam, learning rate 1e-4, batches of 200, at most 100
  epochs, early stopping on validation accuracy with patience 5) on the concatenated pair vectors;
  the pairs are shuffled with a seed and cut 70/15/15 into train/validation/test (the files have no
  split; PEARL's code shuffles them unseeded). Mean and standard deviation over ``seeds``;
* :class:`EntityClusteringEvaluator` (CoNLL-03): NMI of k-means (k = number of entity types,
  ``random_state=0``, 10 initialisations) on the mention vectors against their types.

Each phrase is encoded in one or both ``encodings``: ``"span"``, as slice-st encodes queries and
spans (the mean of the phrase's non-special token vectors, :func:`slice_st.encode.embed_texts`), and
``"sentence"``, the model's own ``model.encode`` (for all-MiniLM-L6-v2: mean over all tokens
including [CLS]/[SEP], then normalised; PEARL's models pool like this too, without the
normalisation). Metrics are ``{encoding}_{metric}`` (e.g. ``span_pearson``), on the 0-1 scale; the
primary metric is that of the first encoding.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from sentence_transformers.base.evaluation import BaseEvaluator

from slice_st.files import append_csv_row

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = [
    "ENCODINGS",
    "encode_phrases",
    "PhraseTaskEvaluator",
    "BirdEvaluator",
    "TurneyEvaluator",
    "PairClassificationEvaluator",
    "EntityClusteringEvaluator",
    "probe_accuracy",
]

logger = logging.getLogger(__name__)

ENCODINGS = ("span", "sentence")


def encode_phrases(
    model: SentenceTransformer,
    phrases: Sequence[str],
    encoding: str = "span",
    *,
    batch_size: int = 64,
    show_progress_bar: bool = False,
) -> np.ndarray:
    """Vectors ``(N, d)`` float32 of ``phrases`` (each distinct phrase encoded once).

    ``encoding="span"``: the mean of the phrase's non-special token vectors (:func:`slice_st.encode.embed_texts`,
    how slice-st encodes a query); ``"sentence"``: ``model.encode``.

    >>> from slice_st import load_model
    >>> encode_phrases(load_model(), ["a dog", "a dog", "the cat"]).shape
    (3, 384)
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}.")
    phrases = list(phrases)
    unique = list(dict.fromkeys(phrases))
    if encoding == "span":
        from slice_st.encode import embed_texts

        vectors = (
            embed_texts(model, unique, batch_size=batch_size, show_progress_bar=show_progress_bar)
            .float()
            .cpu()
            .numpy()
        )
    else:
        vectors = np.asarray(
            model.encode(
                unique,
                batch_size=batch_size,
                show_progress_bar=show_progress_bar,
                convert_to_numpy=True,
            ),
            dtype=np.float32,
        )
    position = {phrase: row for row, phrase in enumerate(unique)}
    return vectors[[position[phrase] for phrase in phrases]]


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def _check_phrases(values: Sequence[str], what: str) -> list[str]:
    values = list(values)
    for index, value in enumerate(values):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{what}[{index}] is empty or not a string: {value!r:.60}.")
    return values


class PhraseTaskEvaluator(BaseEvaluator):
    """Shared machinery: encodings, metric names, the CSV log and the model card.

    Subclasses set ``task`` and ``metric`` (the primary metric's name) and implement :meth:`compute`.
    """

    task = "phrase"
    metric = "score"

    def __init__(
        self,
        *,
        encodings: Sequence[str] = ENCODINGS,
        batch_size: int = 64,
        name: str = "",
        show_progress_bar: bool = False,
        write_csv: bool = True,
    ):
        super().__init__()
        encodings = tuple(encodings)
        if (
            not encodings
            or any(e not in ENCODINGS for e in encodings)
            or len(set(encodings)) != len(encodings)
        ):
            raise ValueError(
                f"encodings must be distinct values of {ENCODINGS}, got {list(encodings)}."
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        self.encodings = encodings
        self.batch_size = batch_size
        self.name = name
        self.show_progress_bar = show_progress_bar
        self.write_csv = write_csv
        self.primary_metric = f"{encodings[0]}_{self.metric}"
        self.csv_file = f"{self.task}_evaluation{'_' + name if name else ''}_results.csv"

    def encode(
        self, model: SentenceTransformer, phrases: Sequence[str], encoding: str
    ) -> np.ndarray:
        return encode_phrases(
            model,
            phrases,
            encoding,
            batch_size=self.batch_size,
            show_progress_bar=self.show_progress_bar,
        )

    def compute(self, model: SentenceTransformer, encoding: str) -> dict[str, float]:
        """Metrics of ``model`` with one encoding, unprefixed (e.g. ``{"pearson": 0.61}``)."""
        raise NotImplementedError

    def __call__(
        self,
        model: SentenceTransformer,
        output_path: str | None = None,
        epoch: int = -1,
        steps: int = -1,
    ) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for encoding in self.encodings:
            for key, value in self.compute(model, encoding).items():
                metrics[f"{encoding}_{key}"] = float(value)
        logger.info(
            f"{type(self).__name__}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        )
        if output_path is not None and self.write_csv:
            append_csv_row(
                output_path,
                self.csv_file,
                ["epoch", "steps", *metrics],
                [epoch, steps, *metrics.values()],
            )
        self.primary_metric = f"{self.encodings[0]}_{self.metric}"
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def get_config_dict(self) -> dict[str, Any]:
        return {"encodings": list(self.encodings)}


class BirdEvaluator(PhraseTaskEvaluator):
    """BIRD: Pearson (primary) and Spearman of the cosine of each phrase pair with the gold relatedness.

    Args:
        phrase1: First phrase of each pair.
        phrase2: Second phrase of each pair.
        scores: Gold relatedness of each pair.
        **kwargs: ``encodings``, ``batch_size``, ``name``, ``show_progress_bar``, ``write_csv`` (see Keyword Args).

    Keyword Args:
        encodings: Which vectors to score: ``"span"`` (the phrase as one whole span, as queries are encoded) and/or
            ``"sentence"`` (``model.encode``); the first is the primary metric's.
        batch_size: Batch size of the encoding.
        name: Suffix of the metric names and the CSV file.
        show_progress_bar: Show progress bars.
        write_csv: Append the metrics to a CSV file when called with ``output_path``.

    Example:
        >>> from slice_st import load_model
        >>> evaluator = BirdEvaluator(["a dog", "a car", "red wine"], ["a puppy", "a banana", "white wine"],
        ...                           [0.9, 0.1, 0.6])
        >>> sorted(evaluator(load_model())), evaluator.primary_metric
        (['sentence_pearson', 'sentence_spearman', 'span_pearson', 'span_spearman'], 'span_pearson')
    """

    task = "bird"
    metric = "pearson"

    def __init__(
        self, phrase1: Sequence[str], phrase2: Sequence[str], scores: Sequence[float], **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.phrase1, self.phrase2 = (
            _check_phrases(phrase1, "phrase1"),
            _check_phrases(phrase2, "phrase2"),
        )
        self.scores = np.asarray(scores, dtype=np.float64)
        if not len(self.phrase1) == len(self.phrase2) == len(self.scores):
            raise ValueError(
                f"got {len(self.phrase1)} phrase1, {len(self.phrase2)} phrase2 and {len(self.scores)} scores."
            )
        if len(self.scores) < 3 or np.ptp(self.scores) == 0:
            raise ValueError("need at least 3 pairs with different scores for a correlation.")

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> BirdEvaluator:
        """From BIRD's ``bird.txt`` (:func:`research.phrase_data.read_bird`)."""
        from research.phrase_data import read_bird

        data = read_bird(path)
        return cls(data.phrase1, data.phrase2, data.labels, **kwargs)

    def compute(self, model: SentenceTransformer, encoding: str) -> dict[str, float]:
        vectors = _unit(self.encode(model, self.phrase1 + self.phrase2, encoding))
        cosines = (vectors[: len(self.phrase1)] * vectors[len(self.phrase1) :]).sum(axis=1)
        if np.ptp(cosines) == 0:
            return {"pearson": math.nan, "spearman": math.nan}
        from scipy import stats

        return {
            "pearson": stats.pearsonr(cosines, self.scores)[0],
            "spearman": stats.spearmanr(cosines, self.scores)[0],
        }


class TurneyEvaluator(PhraseTaskEvaluator):
    """Turney: accuracy of the answer (the first candidate) being the candidate closest to the bigram.

    Exact ties go to the earlier candidate, as ``numpy.argmax`` in PEARL's code.

    Args:
        queries: The bigrams.
        candidates: Candidate words per bigram, the answer first.
        **kwargs: ``encodings``, ``batch_size``, ``name``, ``show_progress_bar``, ``write_csv`` (see Keyword Args).

    Keyword Args:
        encodings: Which vectors to score: ``"span"`` (the phrase as one whole span, as queries are encoded) and/or
            ``"sentence"`` (``model.encode``); the first is the primary metric's.
        batch_size: Batch size of the encoding.
        name: Suffix of the metric names and the CSV file.
        show_progress_bar: Show progress bars.
        write_csv: Append the metrics to a CSV file when called with ``output_path``.

    Example:
        >>> from slice_st import load_model
        >>> evaluator = TurneyEvaluator(["rain coat"], [["raincoat", "violin", "pepper"]], encodings=("span",))
        >>> evaluator(load_model())
        {'span_accuracy': 1.0}
    """

    task = "turney"
    metric = "accuracy"

    def __init__(self, queries: Sequence[str], candidates: Sequence[Sequence[str]], **kwargs: Any):
        super().__init__(**kwargs)
        self.queries = _check_phrases(queries, "queries")
        self.candidates = [
            _check_phrases(options, f"candidates[{i}]") for i, options in enumerate(candidates)
        ]
        if len(self.queries) != len(self.candidates) or not self.queries:
            raise ValueError(
                f"got {len(self.queries)} queries and {len(self.candidates)} candidate lists."
            )
        for index, options in enumerate(self.candidates):
            if len(options) < 2:
                raise ValueError(
                    f"candidates[{index}] needs the answer and at least one distractor."
                )

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> TurneyEvaluator:
        """From Turney's ``turney.txt`` (:func:`research.phrase_data.read_turney`, PEARL's 5 candidates)."""
        from research.phrase_data import read_turney

        data = read_turney(path)
        return cls(data.queries, data.candidates, **kwargs)

    def compute(self, model: SentenceTransformer, encoding: str) -> dict[str, float]:
        width = max(len(options) for options in self.candidates)
        flat = [candidate for options in self.candidates for candidate in options]
        vectors = _unit(self.encode(model, self.queries + flat, encoding))
        queries, candidates = vectors[: len(self.queries)], vectors[len(self.queries) :]
        scores = np.full((len(self.queries), width), -np.inf)
        rows = np.repeat(np.arange(len(self.queries)), [len(o) for o in self.candidates])
        columns = np.concatenate([np.arange(len(o)) for o in self.candidates])
        scores[rows, columns] = (candidates * queries[rows]).sum(axis=1)
        return {"accuracy": float((scores.argmax(axis=1) == 0).mean())}


def probe_accuracy(
    features: np.ndarray,
    labels: np.ndarray,
    seed: int = 0,
    *,
    hidden: int = 256,
    learning_rate: float = 1e-4,
    batch_size: int = 200,
    max_epochs: int = 100,
    patience: int = 5,
    split: tuple[float, float] = (0.70, 0.85),
) -> float:
    """Test accuracy of PEARL's probe: an MLP trained on a seeded 70/15/15 train/validation/test cut.

    scikit-learn's ``MLPClassifier`` (one ReLU hidden layer, logistic output, Adam, no weight
    decay), early stopping on the validation accuracy (its own stratified hold-out of the first
    85%, the same size as PEARL's validation block), the best epoch's weights kept.

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(400, 4)); y = (x[:, 0] > 0).astype(int)
    >>> probe_accuracy(x, y, learning_rate=1e-2) > 0.9
    True
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    features, labels = np.asarray(features, dtype=np.float32), np.asarray(labels)
    order = np.random.default_rng(seed).permutation(len(labels))
    cut_valid, cut_test = math.ceil(len(labels) * split[0]), math.ceil(len(labels) * split[1])
    train, test = order[:cut_test], order[cut_test:]
    if len(test) == 0 or len(np.unique(labels[train])) < 2:
        raise ValueError(
            f"too few pairs ({len(labels)}) for a train/validation/test cut with both labels."
        )
    probe = MLPClassifier(
        hidden_layer_sizes=(hidden,),
        activation="relu",
        solver="adam",
        alpha=0.0,
        batch_size=min(batch_size, cut_valid),
        learning_rate_init=learning_rate,
        max_iter=max_epochs,
        early_stopping=True,
        validation_fraction=(cut_test - cut_valid) / cut_test,
        n_iter_no_change=patience,
        tol=0.0,
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        probe.fit(features[train], labels[train])
    return float((probe.predict(features[test]) == labels[test]).mean())


class PairClassificationEvaluator(PhraseTaskEvaluator):
    """PPDB / PPDB-filtered: accuracy of PEARL's MLP probe on concatenated pair vectors (see :func:`probe_accuracy`).

    Reports ``accuracy`` (mean over ``seeds``) and ``accuracy_std``.

    Args:
        phrase1: First phrase of each pair.
        phrase2: Second phrase of each pair.
        labels: Gold label of each pair (1: paraphrase).
        seeds: Seeds of the probe's splits; the accuracy is their mean.
        probe_options: Keyword arguments of :func:`probe_accuracy`.
        **kwargs: ``encodings``, ``batch_size``, ``name``, ``show_progress_bar``, ``write_csv``.

    Keyword Args:
        encodings: Which vectors to score: ``"span"`` (the phrase as one whole span, as queries are encoded) and/or
            ``"sentence"`` (``model.encode``); the first is the primary metric's.
        batch_size: Batch size of the encoding.
        name: Suffix of the metric names and the CSV file.
        show_progress_bar: Show progress bars.
        write_csv: Append the metrics to a CSV file when called with ``output_path``.

    Example:
        >>> from slice_st import load_model
        >>> pairs = [("big", "large", 1), ("big", "blue", 0), ("fast", "quick", 1), ("fast", "fish", 0)] * 10
        >>> evaluator = PairClassificationEvaluator(*zip(*pairs), encodings=("span",), seeds=(0,))
        >>> sorted(evaluator(load_model()))
        ['span_accuracy', 'span_accuracy_std']
    """

    task = "ppdb"
    metric = "accuracy"

    def __init__(
        self,
        phrase1: Sequence[str],
        phrase2: Sequence[str],
        labels: Sequence[float],
        *,
        seeds: Sequence[int] = (0, 1, 2),
        probe_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.phrase1, self.phrase2 = (
            _check_phrases(phrase1, "phrase1"),
            _check_phrases(phrase2, "phrase2"),
        )
        self.labels = np.asarray(labels, dtype=np.int64)
        if not len(self.phrase1) == len(self.phrase2) == len(self.labels):
            raise ValueError(
                f"got {len(self.phrase1)} phrase1, {len(self.phrase2)} phrase2 and {len(self.labels)} labels."
            )
        if set(np.unique(self.labels).tolist()) != {0, 1}:
            raise ValueError("labels must be 0/1 and hold both classes.")
        self.seeds = tuple(int(seed) for seed in seeds)
        if not self.seeds:
            raise ValueError("need at least one seed.")
        self.probe_options = dict(probe_options or {})

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> PairClassificationEvaluator:
        """From a PEARL PPDB JSON file (:func:`research.phrase_data.read_ppdb`)."""
        from research.phrase_data import read_ppdb

        data = read_ppdb(path)
        return cls(data.phrase1, data.phrase2, data.labels, **kwargs)

    def compute(self, model: SentenceTransformer, encoding: str) -> dict[str, float]:
        vectors = self.encode(model, self.phrase1 + self.phrase2, encoding)
        features = np.concatenate(
            [vectors[: len(self.phrase1)], vectors[len(self.phrase1) :]], axis=1
        )
        scores = [
            probe_accuracy(features, self.labels, seed, **self.probe_options) for seed in self.seeds
        ]
        return {"accuracy": float(np.mean(scores)), "accuracy_std": float(np.std(scores))}

    def get_config_dict(self) -> dict[str, Any]:
        return {"encodings": list(self.encodings), "seeds": list(self.seeds)}


class EntityClusteringEvaluator(PhraseTaskEvaluator):
    """CoNLL-03 entity clustering: NMI of k-means clusters of the mention vectors with the entity types.

    Args:
        phrases: Entity mentions.
        labels: Entity type of each mention.
        seed: Seed of k-means.
        n_init: k-means restarts.
        **kwargs: ``encodings``, ``batch_size``, ``name``, ``show_progress_bar``, ``write_csv``.

    Keyword Args:
        encodings: Which vectors to score: ``"span"`` (the phrase as one whole span, as queries are encoded) and/or
            ``"sentence"`` (``model.encode``); the first is the primary metric's.
        batch_size: Batch size of the encoding.
        name: Suffix of the metric names and the CSV file.
        show_progress_bar: Show progress bars.
        write_csv: Append the metrics to a CSV file when called with ``output_path``.

    Example:
        >>> from slice_st import load_model
        >>> mentions = ["Paris", "London", "Berlin", "John Smith", "Mary Jones", "Peter Pan"]
        >>> evaluator = EntityClusteringEvaluator(mentions, ["LOC"] * 3 + ["PER"] * 3, encodings=("span",))
        >>> evaluator(load_model())["span_nmi"] > 0.5
        True
    """

    task = "conll03"
    metric = "nmi"

    def __init__(
        self,
        phrases: Sequence[str],
        labels: Sequence[str],
        *,
        seed: int = 0,
        n_init: int = 10,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.phrases = _check_phrases(phrases, "phrases")
        self.labels = list(labels)
        if len(self.labels) != len(self.phrases):
            raise ValueError(f"got {len(self.phrases)} phrases and {len(self.labels)} labels.")
        self.num_clusters = len(set(self.labels))
        if self.num_clusters < 2 or len(self.phrases) <= self.num_clusters:
            raise ValueError("need at least 2 entity types and more mentions than types.")
        self.seed, self.n_init = seed, n_init

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> EntityClusteringEvaluator:
        """From a CoNLL-03 JSON-lines file (:func:`research.phrase_data.read_conll_entities`: PER, LOC, ORG)."""
        from research.phrase_data import read_conll_entities

        data = read_conll_entities(path)
        return cls(data.phrases, data.labels, **kwargs)

    def compute(self, model: SentenceTransformer, encoding: str) -> dict[str, float]:
        from sklearn.cluster import KMeans
        from sklearn.metrics import normalized_mutual_info_score

        vectors = self.encode(model, self.phrases, encoding)
        clusters = KMeans(
            n_clusters=self.num_clusters, random_state=self.seed, n_init=self.n_init
        ).fit_predict(vectors)
        return {"nmi": normalized_mutual_info_score(self.labels, clusters)}
