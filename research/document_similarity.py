"""Document similarity with span vectors: Nugget's ParaBank paraphrase identification (Qin & Van Durme, 2023).

Each task is a source document and 20 candidates (one paraphrase, the others BM25-hard); a method
scores every candidate and the task's reciprocal rank of the paraphrase is averaged (MRR; ties are
broken uniformly at random, in expectation). Methods, by what a document is stored as:

* ``document``: one vector, ``model.encode`` (the model's own pooling; truncated at ``max_seq_length``);
* ``mean``: one vector, the mean of all its token vectors (SLICE's whole-text span: windowed, nothing truncated);
* ``tokens``: all its token vectors; MaxSim-mean (ColBERT-style: each source vector takes its best
  cosine among the candidate's vectors; the source's vectors are averaged);
* ``spans``: all its spans of ``min_span..max_span`` words (the mean of their token vectors); the
  source's spans are the queries, and the best span of each candidate comes from the fused span math
  (:func:`research.span_lab.max_span_cosines`, no span matrix for the candidates);
* ``{rule}@{r}``: ``⌈r · tokens⌉`` span vectors per document (``r`` of the token count, Nugget's
  ratio), chosen by ``tile`` (the document cut into that many contiguous near-equal spans: every
  word covered once) or ``central`` (greedy non-overlapping spans of ``min_span..max_span`` words
  with the highest cosine to the document's mean vector); MaxSim-mean between the two small sets.

Every document is encoded once (one forward pass per model window, windows as in
:func:`slice_st.encode_spans`); all methods except ``document`` come from those token vectors.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from sentence_transformers.base.evaluation import BaseEvaluator
from torch import Tensor

from research.span_lab import greedy_disjoint_spans, max_span_cosines, span_cosine_grid, tile_spans
from slice_st.files import append_csv_row, atomic_file
from slice_st.spans import check_span_bounds, pool_spans, span_means
from slice_st.tokens import WINDOW_CONTEXT

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from research.phrase_data import ParaphraseTasks

__all__ = [
    "DocumentTokens",
    "encode_documents",
    "maxsim_mean",
    "reciprocal_ranks",
    "SELECTION_RULES",
    "ParaphraseIdentificationEvaluator",
]

logger = logging.getLogger(__name__)

SELECTION_RULES = ("tile", "central")
BASE_METHODS = ("document", "mean", "tokens", "spans")


# ------------------------------------------------------------------------------------ token store
@dataclass
class DocumentTokens:
    """Token vectors of many documents laid end to end, with each document's word boundaries.

    ``vectors`` ``(N, d)`` float32 (special tokens excluded); ``token_offsets`` ``(D + 1,)``: the
    tokens of document ``i`` are rows ``token_offsets[i]:token_offsets[i + 1]``; ``word_starts``
    ``(W,)`` the first token (relative to its document) of every word, documents end to end, and
    ``word_offsets`` ``(D + 1,)`` where each document's words start in it.
    """

    vectors: Tensor
    token_offsets: Tensor
    word_starts: Tensor
    word_offsets: Tensor

    def __len__(self) -> int:
        return len(self.token_offsets) - 1

    def num_tokens(self) -> Tensor:
        """Tokens per document, ``(D,)``."""
        return self.token_offsets.diff()

    def tokens(self, index: int) -> Tensor:
        """The token vectors ``(T, d)`` of document ``index``."""
        return self.vectors[int(self.token_offsets[index]) : int(self.token_offsets[index + 1])]

    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor, Tensor]:
        """Padded ``(token_embeddings (B, T, d), boundaries (B, U + 1), num_units (B,))`` of some documents.

        Laid out as :mod:`slice_st.spans` expects: word ``u`` of row ``b`` is tokens
        ``boundaries[b, u]:boundaries[b, u + 1]``; shorter rows repeat their last boundary.
        """
        indices = [int(i) for i in indices]
        tokens = [self.tokens(i) for i in indices]
        width = max((len(t) for t in tokens), default=0)
        dim = self.vectors.shape[1]
        embeddings = self.vectors.new_zeros(len(indices), width, dim)
        units = [
            self.word_starts[int(self.word_offsets[i]) : int(self.word_offsets[i + 1])]
            for i in indices
        ]
        num_units = torch.tensor([len(u) for u in units], dtype=torch.long)
        boundaries = torch.zeros(
            len(indices), int(num_units.max()) + 1 if indices else 1, dtype=torch.long
        )
        for row, (values, starts) in enumerate(zip(tokens, units)):
            embeddings[row, : len(values)] = values
            boundaries[row, : len(starts)] = starts
            boundaries[row, len(starts) :] = len(values)
        return embeddings, boundaries, num_units

    def save(self, path: str) -> None:
        """Write the arrays to ``path`` as a NumPy ``.npz`` archive (plain arrays: no pickle)."""
        _save_arrays(
            path,
            {
                key: getattr(self, key)
                for key in ("vectors", "token_offsets", "word_starts", "word_offsets")
            },
        )

    @classmethod
    def load(cls, path: str) -> DocumentTokens:
        """Read what :meth:`save` wrote (a ``ValueError`` if the file is damaged or not such an archive)."""
        return cls(
            **_load_arrays(path, ("vectors", "token_offsets", "word_starts", "word_offsets"))
        )


def _save_arrays(path: str, arrays: dict[str, Tensor]) -> None:
    """``arrays`` into ``path`` as an ``.npz`` archive (plain arrays, no pickle), written beside it then renamed."""
    with atomic_file(
        path
    ) as handle:  # a new temporary file (never through a planted link), then os.replace
        np.savez(handle, **{key: value.detach().cpu().numpy() for key, value in arrays.items()})


def _load_arrays(path: str, keys: Sequence[str]) -> dict[str, Tensor]:
    """The tensors :func:`_save_arrays` wrote; a ``ValueError`` for a damaged, empty or foreign file (never
    unpickled)."""
    import zipfile

    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: torch.from_numpy(np.array(archive[key])) for key in keys}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"{path}: not a readable cache archive ({type(error).__name__}: {error})"
        ) from None


def encode_documents(
    model: SentenceTransformer,
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    show_progress_bar: bool | None = None,
    window_context: int = WINDOW_CONTEXT,
) -> DocumentTokens:
    """Token vectors of each text from one pass (long texts windowed, each token taken once) and its words.

    The tokens are :func:`slice_st.encode_spans`' spans of one token; words are the span core's
    (:func:`slice_st.tokens.unit_boundaries` on the tokens' offsets). Empty texts have no tokens.

    >>> from slice_st import load_model
    >>> store = encode_documents(load_model(), ["A man plays the guitar.", ""])
    >>> store.num_tokens().tolist(), store.batch([0])[1].tolist()
    ([6, 0], [[0, 1, 2, 3, 4, 6]])
    """
    from slice_st.encode import encode_spans
    from slice_st.tokens import unit_boundaries

    texts = list(texts)
    encodings = encode_spans(
        model,
        texts,
        min_span=1,
        max_span=1,
        unit="token",
        batch_size=batch_size,
        show_progress_bar=show_progress_bar,
        window_context=window_context,
    )
    vectors, token_counts, word_starts, word_counts = [], [], [], []
    for text, encoding in zip(texts, encodings):
        count = len(encoding)
        vectors.append(torch.as_tensor(encoding.embeddings, dtype=torch.float32).cpu())
        token_counts.append(count)
        if count == 0:
            word_counts.append(0)
            continue
        offsets = torch.as_tensor(encoding.offsets, dtype=torch.long)[None]
        ones = torch.ones(1, count, dtype=torch.long)
        units = unit_boundaries(ones, torch.zeros_like(ones), offsets, "word", [text])
        words = int(units.num_units[0])
        word_starts.append(units.boundaries[0, :words])
        word_counts.append(words)
    dim = vectors[0].shape[1] if vectors else 0
    return DocumentTokens(
        torch.cat(vectors) if vectors else torch.zeros(0, dim),
        torch.tensor([0] + np.cumsum(token_counts).tolist(), dtype=torch.long),
        torch.cat(word_starts) if word_starts else torch.zeros(0, dtype=torch.long),
        torch.tensor([0] + np.cumsum(word_counts).tolist(), dtype=torch.long),
    )


# ------------------------------------------------------------------------------------------ scoring
def maxsim_mean(queries: Tensor, documents: Tensor, mask: Tensor | None = None) -> Tensor:
    """MaxSim-mean of one set of query vectors ``(Q, d)`` against each of ``B`` vector sets ``(B, N, d)``.

    Each query vector takes its best cosine in a set (``mask`` ``(B, N)`` marks real vectors); the
    ``Q`` maxima are averaged: ``(B,)``. An empty query set or document scores 0.

    >>> maxsim_mean(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[[1.0, 0.0], [1.0,
    ...     1.0]]])).double().round(decimals=4).tolist()
    [0.8536]
    """
    if queries.shape[0] == 0 or documents.shape[1] == 0:
        return torch.zeros(documents.shape[0])
    unit_queries = torch.nn.functional.normalize(queries.float(), dim=-1)
    unit_documents = torch.nn.functional.normalize(documents.float(), dim=-1)
    similarities = unit_documents @ unit_queries.T  # (B, N, Q)
    if mask is not None:
        similarities = similarities.masked_fill(~mask[:, :, None], float("-inf"))
    best = similarities.amax(dim=1)
    return torch.where(torch.isfinite(best), best, torch.zeros_like(best)).mean(dim=1)


def reciprocal_ranks(scores: np.ndarray, answers: Sequence[int]) -> np.ndarray:
    """Reciprocal rank of the answer in each row of ``scores`` ``(n, C)``, ties broken uniformly (expected value).

    >>> reciprocal_ranks(np.array([[0.9, 0.1, 0.5], [0.2, 0.2, 0.1]]), [0, 1]).tolist()
    [1.0, 0.75]
    """
    scores = np.asarray(scores, dtype=np.float64)
    answer_scores = scores[np.arange(len(scores)), np.asarray(answers)]
    greater = (scores > answer_scores[:, None]).sum(axis=1)
    tied = (scores == answer_scores[:, None]).sum(axis=1)  # includes the answer itself
    return np.array([np.mean(1.0 / np.arange(g + 1, g + t + 1)) for g, t in zip(greater, tied)])


def _selected_spans(
    store: DocumentTokens,
    indices: Sequence[int],
    rule: str,
    ratio: float,
    min_span: int,
    max_span: int,
) -> tuple[Tensor, Tensor]:
    """``⌈ratio · tokens⌉`` span vectors of each document chosen by ``rule``: ``(vectors (B, m, d), valid (B, m))``."""
    embeddings, boundaries, num_units = store.batch(indices)
    tokens = boundaries.gather(1, num_units[:, None])[:, 0]
    budget = torch.ceil(tokens.double() * ratio).long().clamp(min=1)
    if rule == "tile":
        starts, ends = tile_spans(num_units, budget)
    elif rule == "central":
        centre = embeddings.sum(dim=1)
        grid = span_cosine_grid(centre, embeddings, boundaries, num_units, min_span, max_span)
        starts, ends = greedy_disjoint_spans(grid, budget, min_span)
    else:
        raise ValueError(f"unknown selection rule {rule!r}; choose from {SELECTION_RULES}.")
    return span_means(embeddings, boundaries, starts, ends)


# --------------------------------------------------------------------------------------- evaluator
def _method_names(
    methods: Sequence[str], rules: Sequence[str], ratios: Sequence[float]
) -> list[str]:
    names = []
    for method in methods:
        if method == "selected":
            names.extend(f"{rule}@{ratio:g}" for rule in rules for ratio in ratios)
        elif method in BASE_METHODS:
            names.append(method)
        else:
            raise ValueError(
                f"unknown method {method!r}; choose from {', '.join(BASE_METHODS + ('selected',))}."
            )
    return names


class ParaphraseIdentificationEvaluator(BaseEvaluator):
    """Nugget's document paraphrase identification: MRR of the paraphrase among the candidates, per method.

    Reports ``{method}_mrr`` (0-1; ×100 is Nugget's scale) and ``{method}_vectors`` (mean vectors
    stored per document) for each method (see :mod:`research.document_similarity`); ``selected``
    expands to ``{rule}@{ratio}`` for every rule and ratio. Primary metric: ``spans_mrr`` (else the
    first method's). With ``cache_dir`` and a ``cache_key`` naming the model's weights (e.g.
    :func:`slice_st.index.fingerprint.model_fingerprint`, as ``python -m research.phrase_eval --cache`` does), the
    documents' token vectors and ``model.encode`` vectors are kept there, keyed by that and the texts,
    so a second run skips the encoding. Without a key nothing is cached (weights change in training).

    Args:
        documents: Document id → text.
        sources: Id of each task's source document.
        candidates: Candidate document ids per task.
        answers: Position of the paraphrase among each task's candidates.
        methods: Which document representations to compare (see :mod:`research.document_similarity`).
        rules: Span selection rules of the ``selected`` method.
        ratios: Fractions of spans kept by the ``selected`` method.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        batch_size: Batch size of the encoding.
        cache_dir: Folder for the encoded documents (with ``cache_key``).
        cache_key: Names the model's weights in the cache (no key: no cache).
        name: Suffix of the metric names and the CSV file.
        show_progress_bar: Show progress bars (``None``: for long inputs).
        write_csv: Append the metrics to a CSV file when called with ``output_path``.

    Example:
        >>> from slice_st import load_model
        >>> docs = {"s": "A man is playing a guitar on stage tonight.",
        ...         "p": "Tonight someone plays guitar on the stage.",
        ...         "n": "The stock market fell sharply on Monday."}
        >>> evaluator = ParaphraseIdentificationEvaluator(docs, ["s"], [["n", "p"]], [1], methods=("mean", "spans"),
        ...                                               max_span=3)
        >>> metrics = evaluator(load_model())
        >>> metrics["spans_mrr"], evaluator.primary_metric
        (1.0, 'spans_mrr')
    """

    def __init__(
        self,
        documents: dict[str, str],
        sources: Sequence[str],
        candidates: Sequence[Sequence[str]],
        answers: Sequence[int],
        *,
        methods: Sequence[str] = (*BASE_METHODS, "selected"),
        rules: Sequence[str] = SELECTION_RULES,
        ratios: Sequence[float] = (0.05, 0.1, 0.25),
        min_span: int = 1,
        max_span: int = 10,
        batch_size: int = 32,
        cache_dir: str | None = None,
        cache_key: str | None = None,
        name: str = "",
        show_progress_bar: bool | None = None,
        write_csv: bool = True,
    ):
        super().__init__()
        check_span_bounds(min_span, max_span)
        if len(sources) != len(candidates) or len(sources) != len(answers) or not sources:
            raise ValueError(
                f"need one candidate list and answer per source: got {len(sources)} sources, "
                f"{len(candidates)} candidate lists, {len(answers)} answers."
            )
        for position, (source, options, answer) in enumerate(zip(sources, candidates, answers)):
            missing = [doc_id for doc_id in (source, *options) if doc_id not in documents]
            if missing:
                raise ValueError(
                    f"task {position}: document {missing[0]!r} is not among the documents."
                )
            if not 0 <= int(answer) < len(options):
                raise ValueError(
                    f"task {position}: answer {answer} is not a position in its {len(options)} candidates."
                )
        for rule in rules:
            if rule not in SELECTION_RULES:
                raise ValueError(f"unknown selection rule {rule!r}; choose from {SELECTION_RULES}.")
        for ratio in ratios:
            if not 0 < float(ratio) <= 1:
                raise ValueError(f"ratios must lie in (0, 1], got {ratio}.")
        self.methods = _method_names(methods, rules, ratios)
        if not self.methods:
            raise ValueError("no method to evaluate.")
        used = list(
            dict.fromkeys(
                [
                    doc_id
                    for source, options in zip(sources, candidates)
                    for doc_id in (source, *options)
                ]
            )
        )
        self.doc_ids = used
        self.texts = [documents[doc_id] for doc_id in used]
        position = {doc_id: index for index, doc_id in enumerate(used)}
        self.sources = [position[source] for source in sources]
        self.candidates = [[position[doc_id] for doc_id in options] for options in candidates]
        self.answers = [int(answer) for answer in answers]
        self.rules, self.ratios = tuple(rules), tuple(float(r) for r in ratios)
        self.min_span, self.max_span = min_span, max_span
        self.batch_size = batch_size
        self.cache_dir, self.cache_key = cache_dir, cache_key
        self.name = name
        self.show_progress_bar = show_progress_bar
        self.write_csv = write_csv
        self.primary_metric = "spans_mrr" if "spans" in self.methods else f"{self.methods[0]}_mrr"
        self.csv_file = (
            f"paraphrase_identification_evaluation{'_' + name if name else ''}_results.csv"
        )
        self.csv_headers = ["epoch", "steps"] + [f"{m}_mrr" for m in self.methods]
        #: Wall time of the last call: ``encode_tokens`` (one pass over the documents) and each method's scoring.
        self.seconds: dict[str, float] = {}

    @classmethod
    def from_tasks(
        cls, tasks: ParaphraseTasks, limit: int | None = None, **kwargs: Any
    ) -> ParaphraseIdentificationEvaluator:
        """From :func:`research.phrase_data.read_parabank_pi` (the first ``limit`` tasks if given)."""
        end = len(tasks) if limit is None else limit
        return cls(
            tasks.documents,
            tasks.sources[:end],
            tasks.candidates[:end],
            tasks.answers[:end],
            **kwargs,
        )

    # ------------------------------------------------------------------ encoding (cached)
    def _cache_path(self, model: SentenceTransformer, kind: str) -> str | None:
        if not self.cache_dir or not self.cache_key:
            return None
        digest = hashlib.sha256("\x00".join(self.texts).encode("utf-8")).hexdigest()[:16]
        os.makedirs(self.cache_dir, exist_ok=True)
        return os.path.join(self.cache_dir, f"{kind}-{self.cache_key}-{digest}.npz")

    def document_tokens(self, model: SentenceTransformer) -> DocumentTokens:
        """The documents' token vectors (from the cache when there is one; a damaged cache file is rebuilt, with a
        warning)."""
        path = self._cache_path(model, "doc-tokens")
        if path and os.path.isfile(path):
            try:
                return DocumentTokens.load(path)
            except ValueError as error:
                logger.warning("%s; rebuilding it.", error)
        store = encode_documents(
            model, self.texts, batch_size=self.batch_size, show_progress_bar=self.show_progress_bar
        )
        if path:
            store.save(path)
        return store

    def document_vectors(self, model: SentenceTransformer) -> Tensor:
        """``model.encode`` of every document, normalised (from the cache when there is one; a damaged one is
        rebuilt)."""
        path = self._cache_path(model, "doc-encode")
        if path and os.path.isfile(path):
            try:
                return _load_arrays(path, ("vectors",))["vectors"]
            except ValueError as error:
                logger.warning("%s; rebuilding it.", error)
        vectors = (
            model.encode(
                self.texts,
                batch_size=self.batch_size,
                convert_to_tensor=True,
                show_progress_bar=bool(self.show_progress_bar),
            )
            .float()
            .cpu()
        )
        vectors = torch.nn.functional.normalize(vectors, dim=-1)
        if path:
            _save_arrays(path, {"vectors": vectors})
        return vectors

    # ------------------------------------------------------------------ scoring
    def scores(self, model: SentenceTransformer) -> dict[str, tuple[np.ndarray, float]]:
        """Per method: candidate scores ``(tasks, candidates)`` (ragged lists padded with -inf) and vectors per
        document."""
        results: dict[str, tuple[np.ndarray, float]] = {}
        width = max(len(c) for c in self.candidates)
        needs_tokens = any(m != "document" for m in self.methods)
        start = time.perf_counter()
        store = self.document_tokens(model) if needs_tokens else None
        self.seconds = {"encode_tokens": time.perf_counter() - start}
        for method in self.methods:
            start = time.perf_counter()
            table = np.full((len(self.sources), width), -np.inf)
            if method == "document" or method == "mean":
                if method == "document":
                    vectors = self.document_vectors(model)
                else:
                    sums = torch.zeros(len(store), store.vectors.shape[1]).index_add_(
                        0,
                        torch.repeat_interleave(torch.arange(len(store)), store.num_tokens()),
                        store.vectors,
                    )
                    vectors = torch.nn.functional.normalize(sums, dim=-1)
                for row, (source, options) in enumerate(zip(self.sources, self.candidates)):
                    table[row, : len(options)] = (vectors[options] @ vectors[source]).numpy()
                memory = 1.0
            elif method == "tokens":
                for row, (source, options) in enumerate(zip(self.sources, self.candidates)):
                    embeddings, _, _ = store.batch(options)
                    mask = (
                        torch.arange(embeddings.shape[1])[None, :]
                        < store.num_tokens()[options][:, None]
                    )
                    table[row, : len(options)] = maxsim_mean(
                        store.tokens(source), embeddings, mask
                    ).numpy()
                memory = float(store.num_tokens()[self._used()].double().mean())
            elif method == "spans":
                for row, (source, options) in enumerate(zip(self.sources, self.candidates)):
                    queries = self._all_spans(store, source)
                    embeddings, boundaries, num_units = store.batch(options)
                    best = max_span_cosines(
                        queries, embeddings, boundaries, num_units, self.min_span, self.max_span
                    )
                    best = torch.where(torch.isfinite(best), best, torch.zeros_like(best))
                    table[row, : len(options)] = best.mean(dim=1).numpy() if len(queries) else 0.0
                memory = self._span_count(store)
            else:
                rule, ratio = method.split("@")
                selected, valid = self._selection(store, rule, float(ratio))
                for row, (source, options) in enumerate(zip(self.sources, self.candidates)):
                    table[row, : len(options)] = maxsim_mean(
                        selected[source][valid[source]], selected[options], valid[options]
                    ).numpy()
                memory = float(valid[self._used()].sum(dim=1).double().mean())
            self.seconds[method] = time.perf_counter() - start
            results[method] = (table, memory)
        return results

    def _used(self) -> list[int]:
        return list(range(len(self.texts)))

    def _all_spans(self, store: DocumentTokens, index: int) -> Tensor:
        embeddings, boundaries, num_units = store.batch([index])
        pooled = pool_spans(embeddings, boundaries, num_units, self.min_span, self.max_span)
        return pooled.embeddings[0][pooled.mask[0]]

    def _span_count(self, store: DocumentTokens) -> float:
        words = store.word_offsets.diff().double()
        lengths = torch.arange(self.min_span, self.max_span + 1, dtype=torch.float64)
        return float((words[:, None] - lengths[None, :] + 1).clamp(min=0).sum(dim=1).mean())

    def _selection(
        self, store: DocumentTokens, rule: str, ratio: float, chunk: int = 64
    ) -> tuple[Tensor, Tensor]:
        parts = []
        for first in range(0, len(store), chunk):
            indices = list(range(first, min(first + chunk, len(store))))
            parts.append(_selected_spans(store, indices, rule, ratio, self.min_span, self.max_span))
        width = max(p[0].shape[1] for p in parts)
        vectors = torch.zeros(len(store), width, store.vectors.shape[1])
        valid = torch.zeros(len(store), width, dtype=torch.bool)
        row = 0
        for part_vectors, part_valid in parts:
            vectors[row : row + len(part_vectors), : part_vectors.shape[1]] = part_vectors
            valid[row : row + len(part_valid), : part_valid.shape[1]] = part_valid
            row += len(part_vectors)
        return vectors, valid

    def __call__(
        self,
        model: SentenceTransformer,
        output_path: str | None = None,
        epoch: int = -1,
        steps: int = -1,
    ) -> dict[str, float]:
        logger.info(
            f"ParaphraseIdentificationEvaluator: {len(self.sources)} tasks, methods {', '.join(self.methods)}"
        )
        results = self.scores(model)
        metrics: dict[str, float] = {}
        for method, (table, memory) in results.items():
            metrics[f"{method}_mrr"] = float(reciprocal_ranks(table, self.answers).mean())
            metrics[f"{method}_vectors"] = memory
            logger.info(
                f"{method:>14}: MRR {100 * metrics[f'{method}_mrr']:.2f}  vectors/doc {memory:.1f}  "
                f"({self.seconds[method]:.1f} s)"
            )
        if output_path is not None and self.write_csv:
            row = [epoch, steps] + [metrics[header] for header in self.csv_headers[2:]]
            append_csv_row(output_path, self.csv_file, self.csv_headers, row)
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    @property
    def description(self) -> str:
        return "Paraphrase Identification"

    def get_config_dict(self) -> dict[str, Any]:
        return {"methods": self.methods, "min_span": self.min_span, "max_span": self.max_span}
