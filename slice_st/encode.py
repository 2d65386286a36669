"""``encode_spans``, ``encode_span_queries`` and ``best_spans``: one forward pass per text, then every span is a cheap
mean. Importing :mod:`slice_st` makes them methods of ``SentenceTransformer`` (``model.encode_spans(texts)``).

``model`` is a ``SentenceTransformer`` with a fast tokenizer (e.g. from :func:`slice_st.load_model`). Options shared by
these functions, as in ``SentenceTransformer.encode_document`` / ``encode_query``: ``prompt_name``/``prompt`` pick the
texts' prompt (``query_prompt_name``/``query_prompt`` the queries'), whose tokens condition the others but belong to no
span. ``min_span``/``max_span``/``unit`` (``"word"`` or ``"token"``) default to the model's span settings
(:func:`slice_st.get_span_config`), ``max_span`` capped at one model window. ``batch_size`` counts windows per forward
pass; ``show_progress_bar=None`` shows one for long inputs only; ``device`` goes to ``model.encode``. Texts longer than
the model's window are split into overlapping windows with ``window_context`` units of context on each side of the spans
a window owns. Empty texts have no spans; anything that is not a string raises :class:`SpanInputError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import numbers
import warnings
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from slice_st._rerank import RerankRows, merge_key, rerank_context, unit_words
from slice_st.config import SpanConfig, get_span_config
from slice_st.errors import ModelLoadError, SpanInputError, SpanPoolingWarning, WindowError
from slice_st.loading import check_device, check_tokenizer
from slice_st.scoring import SpanScorer, query_profiles, resolve_scorer, span_costs, unit_flags
from slice_st.spans import SIMILARITIES, BestSpans, best_span_scores, greedy_disjoint, pool_spans, pool_units
from slice_st.tokens import SPAN_PROCESSING_KWARGS, WINDOW_CONTEXT, Window, plan_windows, text_units, unit_boundaries

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = [
    "SpanEncoding",
    "SpanMatch",
    "SpanSearchResult",
    "encode_spans",
    "encode_span_queries",
    "best_spans",
    "best_spans_paired",
    "embed_texts",
]

#: Windows sent to one ``model.encode`` call: bounds memory while keeping its length sorting useful.
WINDOWS_PER_CALL = 1024
#: ``precision`` values, as in ``SentenceTransformer.encode``.
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
#: Prompt names used for the texts whose spans are taken, in order (as ``SentenceTransformer.encode_document``).
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def resolve_prompt(model, prompt: str | None = None, prompt_name: str | None = None, role: str = "document") -> str:
    """The prompt text of one side (``""``: none), chosen as ``encode_query``/``encode_document`` choose it."""
    if prompt is not None:
        if not isinstance(prompt, str):
            raise SpanInputError(f"prompt must be a string, got {type(prompt).__name__}.")
        return prompt
    prompts = getattr(model, "prompts", None) or {}
    if prompt_name is not None and prompt_name not in prompts:
        raise SpanInputError(f"prompt_name {prompt_name!r} is not one of the model's prompts: {sorted(prompts)}.")
    names = [prompt_name] if prompt_name is not None else ["query"] if role == "query" else [*DOCUMENT_PROMPT_NAMES]
    names.append(getattr(model, "default_prompt_name", None))
    return next((prompts[name] or "" for name in names if name is not None and name in prompts), "")


_CHECKED_POOLING: weakref.WeakSet = weakref.WeakSet()


def check_span_pooling(model) -> None:
    """Warn (once per model) when the model's sentence embedding is not the mean of its token vectors."""
    target = getattr(model, "_model", model)  # a PooledEncoder stands for its model
    with contextlib.suppress(TypeError):  # not weak-referenceable: check every time
        if target in _CHECKED_POOLING:
            return
        _CHECKED_POOLING.add(target)
    modules = list(target) if isinstance(target, Iterable) else []
    pooling = [hasattr(m, "pooling_mode") or getattr(m, "provides_span_embeddings", False) is True for m in modules]
    if not any(pooling):
        return
    position = pooling.index(True)
    mode = getattr(modules[position], "pooling_mode", "mean")
    modes = (mode,) if isinstance(mode, str) else tuple(mode)
    after = [type(module).__name__ for module in modules[position + 1 :] if type(module).__name__ != "Normalize"]
    problems = [f"its pooling is {'+'.join(modes)}, not mean"] if modes != ("mean",) else []
    if after:
        problems.append(f"{', '.join(after)} follow{'s' if len(after) == 1 else ''} its pooling")
    if problems:
        warnings.warn(
            f"This model's sentence embedding is not a mean of token vectors ({'; '.join(problems)}). Span and query "
            "vectors are means of the transformer's token vectors, so they live in another space than model.encode's "
            "embeddings; span scores may be poor. A SLICE model is Transformer → Pooling(mean) → (Normalize).",
            SpanPoolingWarning,
            stacklevel=4,
        )


def _truncate_dim(model, truncate_dim: int | None = None, precision: str = "float32") -> int | None:
    """Check ``precision``; ``truncate_dim`` (else the model's, as ``encode``) checked, ``None``: no truncation."""
    if precision not in PRECISIONS:
        raise SpanInputError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
    truncate_dim = getattr(model, "truncate_dim", None) if truncate_dim is None else truncate_dim
    if truncate_dim is None:
        return None
    dim = token_dimension(model)
    if isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or not 1 <= truncate_dim <= dim:
        raise SpanInputError(f"truncate_dim must be an integer in 1..{dim}, got {truncate_dim!r}.")
    return truncate_dim


def as_text_list(texts: Any, what: str = "texts") -> tuple[list[str], bool]:
    """Validate ``texts`` (a string or an iterable of strings); return the list and whether it was one string."""
    if isinstance(texts, str):
        return [texts], True
    if texts is None or isinstance(texts, (bytes, dict)) or not isinstance(texts, Iterable):
        raise SpanInputError(f"{what} must be a string or a list of strings, got {type(texts).__name__}.")
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise SpanInputError(f"{what}[{index}] must be a string, got {type(text).__name__}: {text!r:.60}.")
    return texts, False


def check_threshold(threshold: Any) -> float | None:
    """``None`` or a finite real number (a cosine cut-off), as a float; anything else is a :class:`SpanInputError`."""
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise SpanInputError(f"threshold must be a number (a cosine), got {type(threshold).__name__}.")
    value = float(threshold)
    if not math.isfinite(value):
        raise SpanInputError(f"threshold must be a finite number, got {value}.")
    # Scores are float32: a cut-off beyond its range means its largest value, without an overflow warning.
    return min(max(value, -_FLOAT32_MAX), _FLOAT32_MAX)


def check_top_k(top_k: Any, name: str = "top_k", optional: bool = False) -> int | None:
    """A positive integer (``None`` too when ``optional``), else a :class:`SpanInputError`."""
    if optional and top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise SpanInputError(f"{name} must be a positive integer, got {top_k!r}.")
    return int(top_k)


def query_list(queries: Any) -> list[str]:
    """:func:`as_text_list` of ``queries``, at least one."""
    queries, _ = as_text_list(queries, "queries")
    if not queries:
        raise SpanInputError("queries is empty: give at least one query.")
    return queries


def search_scorer(scorer: str | SpanScorer | None) -> SpanScorer:
    """The scorer of a search, resolved once; a bad one is a :class:`SpanInputError`."""
    try:
        return resolve_scorer(scorer)
    except ValueError as error:
        raise SpanInputError(str(error)) from None


def check_overlap(overlap: Any) -> bool:
    """``overlap`` if it is a bool (whether a search may return spans overlapping a better one of the same text)."""
    if not isinstance(overlap, bool):
        raise SpanInputError(f"overlap must be True or False, got {overlap!r}.")
    return overlap


def resolve_span_config(model, min_span, max_span, unit) -> SpanConfig:
    """The model's span settings with the given overrides; ``max_span`` capped at one model window."""
    config = get_span_config(model).replace(min_span=min_span, max_span=max_span, unit=unit)
    window = model_window(model)
    if config.min_span > window:
        raise SpanInputError(f"min_span={config.min_span} is longer than a model window ({window} tokens).")
    return config.replace(max_span=window) if config.max_span > window else config


def model_window(model) -> int:
    """Content tokens per window: the model's max_seq_length minus the special tokens it adds."""
    tokenizer = model.tokenizer
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        raise SpanInputError("Span encoding needs a model with a fast (Rust) tokenizer to get character offsets.")
    max_length = min(int(model.max_seq_length or getattr(tokenizer, "model_max_length", None) or 512), 1_000_000)
    check_tokenizer(model)
    return max_length - tokenizer.num_special_tokens_to_add(pair=False)


def token_dimension(model) -> int:
    """Dimension of the token vectors (span vectors have it too, whatever ``truncate_dim`` says)."""
    return model[0].get_embedding_dimension()


@dataclass
class _Rows:
    """Encoded windows, padded: token embeddings, units (as ``UnitBoundaries``), span starts ``owned`` ``(lo, hi)``."""

    windows: list[Window]
    token_embeddings: Tensor
    boundaries: Tensor
    num_units: Tensor
    owned: tuple[Tensor, Tensor]
    char_starts: Tensor
    char_ends: Tensor

    def rows(self, size: int) -> Iterator[_Rows]:
        """Sub-batches of ``size`` windows of similar length, trimmed to their own padding."""
        order = torch.argsort(self.boundaries[:, -1], descending=True).tolist()
        for start in range(0, len(order), size):
            index = order[start : start + size]
            num_units = self.num_units[index]
            width = int(num_units.max()) if index else 0
            boundaries = self.boundaries[index, : width + 1]
            length = max(int(boundaries[:, -1].max()), 1)
            windows, owned = [self.windows[i] for i in index], (self.owned[0][index], self.owned[1][index])
            chars = self.char_starts[index, :width], self.char_ends[index, :width]
            yield _Rows(windows, self.token_embeddings[index, :length], boundaries, num_units, owned, *chars)


def encode_windows(
    model: SentenceTransformer,
    texts: Sequence[str],
    span_config: SpanConfig,
    batch_size: int,
    show_progress_bar: bool | None,
    window_context: int,
    desc: str = "Encoding spans",
    *,
    prompt: str = "",
    device: str | None = None,
    errors: list[tuple[int, str]] | None = None,
) -> Iterator[_Rows]:
    """Plan windows (the one check of ``batch_size``, ``window_context``, ``device``); yield padded sub-batches from
    ``model.encode``, ``prompt`` marked special. Uncuttable texts raise first, or go to ``errors`` (index, reason)."""
    check_top_k(batch_size, "batch_size")
    if isinstance(window_context, bool) or not isinstance(window_context, int) or window_context < 0:
        raise SpanInputError(f"window_context must be a non-negative integer, got {window_context!r}.")
    check_span_pooling(model)
    device = check_device(device)  # "cuda" on a CPU-only torch: a clear error, not torch's bare AssertionError
    window = model_window(model)
    room = window - (len(model.tokenizer(prompt, add_special_tokens=False)["input_ids"]) if prompt else 0)
    if room < 1:
        raise SpanInputError(f"The prompt {prompt!r} leaves no room for text in the model's window of {window} tokens.")
    bad: list[tuple[int, str]] = [] if errors is None else errors
    windows = plan_windows(
        model.tokenizer, texts, room, span_config.max_span, window_context, span_config.unit, errors=bad
    )
    if bad and errors is None:
        raise WindowError(*bad[0], errors=bad)
    show = len(windows) > 4 * batch_size if show_progress_bar is None else show_progress_bar

    def batches() -> Iterator[_Rows]:  # the checks above run at the call, the encoding when iterated
        with tqdm(total=len(windows), desc=desc, unit="window", disable=not show) as progress:
            for start in range(0, len(windows), WINDOWS_PER_CALL):
                chunk = windows[start : start + WINDOWS_PER_CALL]
                strings = [texts[w.text_index][w.char_start : w.char_end] for w in chunk]  # stripped: ST strips too
                outputs = model.encode(
                    strings,
                    output_value=None,
                    processing_kwargs=SPAN_PROCESSING_KWARGS,
                    prompt=prompt,  # "" also keeps the model's default_prompt_name away
                    batch_size=batch_size,
                    show_progress_bar=False,
                    device=device,
                )
                if prompt:
                    outputs = [_without_prompt(out, prompt) for out in outputs]
                yield from _pad_window_outputs(chunk, strings, outputs, span_config.unit).rows(batch_size)
                progress.update(len(chunk))

    return batches()


def _without_prompt(out: dict[str, Any], prompt: str) -> dict[str, Any]:
    """A window's outputs with the prompt's tokens marked special and offsets made relative to the text."""
    offsets, special = out["offset_mapping"], out["special_tokens_mask"].bool()
    in_prompt = ~special & (offsets[:, 0] < len(prompt))
    if bool((in_prompt & (offsets[:, 1] > len(prompt))).any()):
        raise SpanInputError(
            f"The prompt {prompt!r} merges with the start of the text into one token; end the prompt with a space or "
            f"punctuation."
        )
    outside = special | in_prompt
    return {
        **out,
        "special_tokens_mask": outside.to(out["special_tokens_mask"].dtype),
        "offset_mapping": torch.where(outside[:, None], torch.zeros_like(offsets), offsets - len(prompt)),
    }


def _pad(outputs: list[dict[str, Tensor]], key: str, padding_value: float = 0) -> Tensor:
    return torch.nn.utils.rnn.pad_sequence([out[key] for out in outputs], batch_first=True, padding_value=padding_value)


def _pad_window_outputs(windows: list[Window], strings: list[str], outputs: list[dict[str, Any]], unit: str) -> _Rows:
    vectors = _pad(outputs, "token_embeddings")
    if not bool(torch.isfinite(vectors).all()):  # else every score is NaN and every search finds "no match"
        row = int((~torch.isfinite(vectors)).flatten(1).any(1).nonzero()[0, 0])
        raise ModelLoadError(
            f"The model gives NaN or infinite token vectors (text {windows[row].text_index}): its weights are "
            "broken (a damaged checkpoint or adapter, or an overflow in half precision)."
        )
    masks = _pad(outputs, "attention_mask"), _pad(outputs, "special_tokens_mask", 1)
    units = unit_boundaries(*masks, _pad(outputs, "offset_mapping"), unit, strings)
    device = units.num_units.device
    expected = torch.tensor([w.num_words if unit == "word" else w.num_tokens for w in windows], device=device)
    planned = expected >= 0  # short texts are not tokenized while planning (-1): nothing to check
    if not torch.equal(units.num_units[planned], expected[planned]):
        row = int(((units.num_units != expected) & planned).nonzero()[0, 0])
        raise RuntimeError(
            f"Window {row} of text {windows[row].text_index} tokenized into {int(units.num_units[row])} {unit}s "
            f"inside the model but {int(expected[row])} when planned; the model's tokenization of a text "
            "fragment differs from that of the whole text (prompts or a custom preprocess?)."
        )
    # Owned span starts [lo, hi): units whose first character lies in the window's owned range.
    unit_chars = units.char_starts + torch.tensor([w.char_start for w in windows], device=device)[:, None]
    exists = torch.arange(unit_chars.shape[1], device=device)[None, :] < units.num_units[:, None]
    owned = tuple(
        ((unit_chars < torch.tensor(bounds, device=device)[:, None]) & exists).sum(dim=1)
        for bounds in ([w.own_char_lo for w in windows], [w.own_char_hi for w in windows])
    )
    return _Rows(windows, vectors, units.boundaries, units.num_units, owned, units.char_starts, units.char_ends)


@dataclass
class SpanEncoding:
    """All spans of one text, ordered by start, then by length; ``spans[i] == text[offsets[i, 0]:offsets[i, 1]]``.

    Args:
        text: The text.
        offsets: Character offsets ``(S, 2)`` of each span (``S = 0`` for an empty text).
        units: Unit offsets ``(S, 2)`` (start, end) of each span, in words or tokens.
        embeddings: Span vectors ``(S, d)``, numpy or torch.
    """

    text: str
    offsets: np.ndarray
    units: np.ndarray
    embeddings: np.ndarray | Tensor

    @cached_property
    def spans(self) -> list[str]:
        """The span strings, exactly ``text[start:end]``."""
        return [self.text[start:end] for start, end in self.offsets.tolist()]

    def __len__(self) -> int:
        return len(self.offsets)


def encode_spans(
    model: SentenceTransformer,
    texts: str | Sequence[str],
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    min_span: int | None = None,
    max_span: int | None = None,
    unit: str | None = None,
    batch_size: int = 32,
    normalize_embeddings: bool = False,
    precision: str = "float32",
    truncate_dim: int | None = None,
    show_progress_bar: bool | None = None,
    convert_to_numpy: bool = True,
    convert_to_tensor: bool = False,
    device: str | None = None,
    window_context: int = WINDOW_CONTEXT,
) -> list[SpanEncoding] | SpanEncoding:
    """Every span of ``min_span..max_span`` units of each text, from one forward pass per text.

    Memory grows as words × ``max_span`` × dim per text; to search, prefer :func:`best_spans`. The options not
    listed here are shared (module :mod:`slice_st.encode`); the vector options are ``encode_document``'s, applied in
    this order: ``truncate_dim``, ``normalize_embeddings``, ``precision`` (int8 ranges from all spans of the call).

    Args:
        texts: A text or a list of texts.

    Returns:
        A :class:`SpanEncoding` per text, or one for a single string.

    Example:
        >>> from slice_st import load_model
        >>> result = load_model().encode_spans("A man plays the guitar.", max_span=2)
        >>> result.spans[:3], result.embeddings.shape
        (['A', 'A man', 'man'], (9, 384))
    """
    truncate_dim = _truncate_dim(model, truncate_dim, precision)
    text_list, single = as_text_list(texts)
    span_config = resolve_span_config(model, min_span, max_span, unit)
    prompt_text = resolve_prompt(model, prompt, prompt_name, "document")
    windows = encode_windows(
        model, text_list, span_config, batch_size, show_progress_bar, window_context, prompt=prompt_text, device=device
    )
    per_text: list[list[tuple[int, Tensor, Tensor, Tensor]]] = [[] for _ in text_list]
    for rows in windows:
        for text_index, part in _window_spans(rows, span_config, truncate_dim):
            per_text[text_index].append(part)
    dim = truncate_dim or token_dimension(model)
    no_spans = [torch.zeros(0, 2, dtype=torch.long)] * 2 + [torch.zeros(0, dim, device=device or model.device)]
    columns = [  # each text's (offsets, units, vectors), its windows in text order
        [torch.cat(column) for column in zip(*(part[1:] for part in sorted(parts, key=lambda part: part[0])))]
        or no_spans
        for parts in per_text
    ]
    options = (normalize_embeddings, precision, convert_to_numpy and not convert_to_tensor)
    vectors = _output_vectors([found[2] for found in columns], *options)
    results = [
        SpanEncoding(text, found[0].cpu().numpy(), found[1].cpu().numpy(), text_vectors)
        for text, found, text_vectors in zip(text_list, columns, vectors)
    ]
    return results[0] if single else results


def _window_spans(rows: _Rows, span_config: SpanConfig, truncate_dim: int | None):
    """Each window's spans: ``(text index, (first owned character, offsets, units, vectors))``."""
    pooled = pool_spans(
        rows.token_embeddings, rows.boundaries, rows.num_units, span_config.min_span, span_config.max_span, rows.owned
    )
    vectors = pooled.embeddings[..., :truncate_dim]
    char_starts = rows.char_starts[:, pooled.starts]
    char_ends = rows.char_ends[:, (pooled.ends - 1).clamp(min=0)]
    for row, window in enumerate(rows.windows):
        keep = pooled.mask[row]
        offsets = torch.stack([char_starts[row][keep], char_ends[row][keep]], dim=1) + window.char_start
        units = torch.stack([pooled.starts[keep], pooled.ends[keep]], dim=1) + window.first_unit(span_config.unit)
        yield window.text_index, (window.own_char_lo, offsets, units, vectors[row][keep])


def _output_vectors(vectors: list[Tensor], normalize: bool, precision: str, to_numpy: bool) -> list:
    """``encode``'s vector options: normalized, quantized together (int8 ranges from all), numpy or torch."""
    from sentence_transformers import quantize_embeddings

    if normalize:
        vectors = [torch.nn.functional.normalize(v, dim=-1) for v in vectors]
    if precision != "float32" and vectors:
        try:
            vectors = [torch.from_numpy(np.ascontiguousarray(v)) for v in quantize_embeddings(vectors, precision)]
        except ValueError as error:  # int8 ranges from one vector
            raise SpanInputError(f"precision={precision!r}: {error}") from None
    return [v.cpu().numpy() if to_numpy else v for v in vectors]


def embed_texts(
    model: SentenceTransformer,
    texts: str | Sequence[str],
    *,
    batch_size: int = 32,
    show_progress_bar: bool | None = None,
    window_context: int = WINDOW_CONTEXT,
    prompt: str = "",
    device: str | None = None,
) -> Tensor:
    """Each text as its own whole span: the mean of its token vectors, the engine of :func:`encode_span_queries`
    (long texts windowed, each token counted once; empty or token-less texts raise).

    Args:
        texts: A text or a list of texts (non-empty).
        prompt: A prompt text (already resolved), left out of the mean.

    Returns:
        A float tensor ``(N, d)`` on the model's device.
    """
    text_list, _ = as_text_list(texts, "queries")
    for index, text in enumerate(text_list):
        if not text.strip():
            raise SpanInputError(f"queries[{index}] is empty or whitespace.")
    config = SpanConfig(1, 1, "word")  # a query is one whole span: its windows need no room for spans
    options = {"prompt": prompt, "device": device}
    windows = encode_windows(
        model, text_list, config, batch_size, show_progress_bar, window_context, "Encoding queries", **options
    )
    totals = torch.zeros(len(text_list), token_dimension(model), device=device or model.device)
    counts = torch.zeros(len(text_list), device=totals.device)
    for rows in windows:
        index = torch.tensor([w.text_index for w in rows.windows], device=totals.device)
        total, count = pool_units(rows.token_embeddings, rows.boundaries, *rows.owned)
        totals.index_add_(0, index, total.to(totals.device))
        counts.index_add_(0, index, count.to(totals.device, totals.dtype))
    if bool((counts == 0).any()):
        index = int((counts == 0).nonzero()[0, 0])
        raise SpanInputError(f"queries[{index}] has no tokens: {text_list[index]!r:.60}.")
    return totals / counts[:, None]


def encode_span_queries(
    model: SentenceTransformer,
    queries: str | Sequence[str],
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    batch_size: int = 32,
    show_progress_bar: bool | None = None,
    precision: str = "float32",
    convert_to_numpy: bool = True,
    convert_to_tensor: bool = False,
    device: str | None = None,
    normalize_embeddings: bool = False,
    truncate_dim: int | None = None,
    window_context: int = WINDOW_CONTEXT,
):
    """The query vectors that span vectors are compared with: each query encoded as one whole span, the mean of its
    token vectors (the query side of :func:`best_spans` and ``SpanIndex.search``).

    Use this, not ``model.encode(query)``, to score queries against :func:`encode_spans` vectors: ``encode`` gives
    the model's sentence embedding (its pooling and modules, special tokens in the mean), another vector. The
    options are ``encode_query``'s (the others as in :func:`encode_spans`); the prompt's tokens are left out.

    Args:
        queries: A query or a list of queries.

    Returns:
        ``(Q, d)`` query vectors, or ``(d,)`` for a single string.

    Example:
        >>> from slice_st import load_model
        >>> model = load_model()
        >>> vectors = model.encode_span_queries(["plays the guitar", "a flight"])
        >>> vectors.shape, vectors.dtype
        ((2, 384), dtype('float32'))
    """
    truncate_dim = _truncate_dim(model, truncate_dim, precision)
    prompt_text = resolve_prompt(model, prompt, prompt_name, "query")
    options = {"batch_size": batch_size, "show_progress_bar": show_progress_bar, "window_context": window_context}
    vectors = embed_texts(model, queries, prompt=prompt_text, device=device, **options)[:, :truncate_dim]
    vectors = _output_vectors([vectors], normalize_embeddings, precision, convert_to_numpy and not convert_to_tensor)[0]
    return vectors[0] if isinstance(queries, str) else vectors


@dataclass(frozen=True)
class SpanMatch:
    """One matched span: ``text[start:end] == span``.

    Args:
        query_index: Position of the query.
        text_index: Position of the text.
        start: First character of the span in the text.
        end: Character after the span.
        span: ``text[start:end]``.
        score: The span scorer's score: what ranks the span and what thresholds compare; never above ``similarity``.
        unit_start: First unit (word or token) of the span.
        unit_end: Unit after the span.
        similarity: The span's plain similarity to the query (the model's ``similarity_fn_name``).
    """

    query_index: int
    text_index: int
    start: int
    end: int
    span: str
    score: float
    unit_start: int
    unit_end: int
    similarity: float | None = None


@dataclass(eq=False, repr=False)
class SpanSearchResult(Sequence):
    """Best spans for every (query, text) pair; ``result[q][t]`` is a list of :class:`SpanMatch`, best first.

    Args:
        queries: The queries.
        texts: The texts searched.
        scores: ``(Q, T, k)`` span scorer's scores, ``-inf`` where a text has fewer spans (``k = top_k`` or less).
        starts: ``(Q, T, k)`` first characters (-1: missing).
        ends: ``(Q, T, k)`` end characters.
        unit_starts: ``(Q, T, k)`` first units.
        unit_ends: ``(Q, T, k)`` end units.
        similarity_fn_name: What the similarities are (``"cosine"``, ``"dot"``, ``"euclidean"``, ``"manhattan"``).
        similarities: ``(Q, T, k)`` plain similarities of the same spans.
        scorer: The name of the span scorer behind ``scores``.
        skipped: ``(text index, reason)`` of texts left out by ``on_error="skip"`` (they have no spans).
    """

    queries: list[str]
    texts: list[str]
    scores: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    unit_starts: np.ndarray
    unit_ends: np.ndarray
    similarity_fn_name: str
    similarities: np.ndarray
    scorer: str
    skipped: list[tuple[int, str]]

    def __len__(self) -> int:
        return len(self.queries)

    def __getitem__(self, query_index):  # noqa: D105
        if isinstance(query_index, slice):
            return [self[q] for q in range(len(self))[query_index]]
        query_index = range(len(self.queries))[query_index]  # IndexError past the end ends iteration
        return [self.matches(query_index, text_index) for text_index in range(len(self.texts))]

    def matches(self, query_index: int, text_index: int) -> list[SpanMatch]:
        """The top spans of one text for one query, best first (empty for a text without spans)."""
        query_index = range(len(self.queries))[query_index]
        scores = self.scores[query_index, text_index]
        return [self._match(query_index, text_index, rank) for rank in range(len(scores)) if np.isfinite(scores[rank])]

    def best(self, query_index: int) -> np.ndarray:
        """``(T,)`` best score of each text for one query (``-inf`` for texts without spans)."""
        return self.scores[query_index, :, 0] if self.scores.shape[1] else np.zeros(0, np.float32)

    def ranked(self, query_index: int, top_k: int | None = None, threshold: float | None = None) -> list[SpanMatch]:
        """The texts' best spans for one query, sorted by score, cut by ``threshold`` and ``top_k`` (``None``: all)."""
        top_k, threshold = check_top_k(top_k, optional=True), check_threshold(threshold)
        best = self.best(query_index)
        order = np.argsort(-best, kind="stable")
        order = [t for t in order if np.isfinite(best[t]) and (threshold is None or best[t] >= threshold)]
        return [self._match(range(len(self.queries))[query_index], int(t), 0) for t in order[:top_k]]

    def _match(self, query_index: int, text_index: int, rank: int) -> SpanMatch:
        at = (query_index, text_index, rank)
        start, end = int(self.starts[at]), int(self.ends[at])
        units = int(self.unit_starts[at]), int(self.unit_ends[at])
        values = float(self.scores[at]), *units, float(self.similarities[at])
        return SpanMatch(query_index, text_index, start, end, self.texts[text_index][start:end], *values)


def best_spans(
    model: SentenceTransformer,
    queries: str | Sequence[str],
    texts: str | Sequence[str],
    *,
    top_k: int = 1,
    prompt_name: str | None = None,
    prompt: str | None = None,
    query_prompt_name: str | None = None,
    query_prompt: str | None = None,
    min_span: int | None = None,
    max_span: int | None = None,
    unit: str | None = None,
    batch_size: int = 32,
    show_progress_bar: bool | None = None,
    device: str | None = None,
    similarity_fn_name: str | None = None,
    window_context: int = WINDOW_CONTEXT,
    scorer: str | SpanScorer | None = None,
    overlap: bool = False,
    on_error: str = "raise",
) -> SpanSearchResult:
    """For every (query, text) pair, the ``top_k`` spans of the text most similar to the query.

    One forward pass per text and per query, fused scoring (no span vectors stored); a query's vector is
    :func:`encode_span_queries`'. The options not listed here are shared (module :mod:`slice_st.encode`).

    Args:
        queries: A query or a list of queries.
        texts: A text or a list of texts to search.
        top_k: Spans kept per (query, text) pair.
        similarity_fn_name: ``"cosine"``, ``"dot"``, ``"euclidean"`` or ``"manhattan"`` (``None``: the model's).
        scorer: What ranks the spans (:mod:`slice_st.scoring`): ``"reranked"`` (default), ``"phrase"`` (the
            similarity minus small costs for spans that do not look like a phrase), ``"max-cosine"`` (the paper's
            protocol) or a :class:`slice_st.scoring.SpanScorer`.
        overlap: Also return spans overlapping a better one of the same text.
        on_error: ``"raise"`` (a text that cannot be cut into windows is a :class:`SpanInputError`, raised before any
            text is encoded) or ``"skip"`` (it gets no spans and is listed in ``result.skipped``).

    Returns:
        A :class:`SpanSearchResult`: ``result[q][t]`` lists the best spans of text ``t`` for query ``q``.

    Example:
        >>> from slice_st import load_model
        >>> texts = ["Yesterday a man played the guitar badly."]
        >>> match = load_model().best_spans(["plays the guitar"], texts, max_span=4)[0][0][0]
        >>> match.span, round(match.similarity, 2) > 0.6, match.score <= match.similarity
        ('played the guitar', True, True)
    """
    top_k = check_top_k(top_k)
    if on_error not in ("raise", "skip"):
        raise SpanInputError(f"on_error must be 'raise' or 'skip', got {on_error!r}.")
    queries, texts = query_list(queries), as_text_list(texts)[0]
    options = {name: value for name, value in locals().items() if name in _PAIRED_OPTIONS or name == "overlap"}
    errors = [] if on_error == "skip" else None
    return _best_spans(model, queries, texts, top_k, paired=False, errors=errors, **options)


def _best_spans(model, queries: list[str], texts: list[str], top_k: int, *, paired, errors, overlap=False, **options):
    """:func:`best_spans` and :func:`best_spans_paired` (query ``i`` against text ``i``): checked options in."""
    search = _Search(model, queries, texts, top_k, paired, overlap, options)
    batch_size, show, context = options["batch_size"], options["show_progress_bar"], options["window_context"]
    prompt = resolve_prompt(model, options["prompt"], options["prompt_name"], "document")
    windows = encode_windows(
        model, texts, search.config, batch_size, show, context, prompt=prompt, device=options["device"], errors=errors
    )
    for rows in windows:
        search.add(search.best_of_rows(rows), rows)
    found = [search.arrays[key] for key in ("scores", "starts", "ends", "unit_starts", "unit_ends", "similarities")]
    names = [""] * len(queries) if paired else queries
    return SpanSearchResult(names, texts, *found[:5], search.similarity, found[5], search.scorer.name, errors or [])


class _Search:
    """One best-span search: settings and each text's running ``(Q, k)`` top spans (``paired``: one query, its own)."""

    def __init__(self, model, queries: list[str], texts: list[str], top_k: int, paired: bool, overlap: bool, options):
        self.texts, self.paired, self.overlap = texts, paired, overlap
        self.config = config = resolve_span_config(model, options["min_span"], options["max_span"], options["unit"])
        similarity = options["similarity_fn_name"] or getattr(model, "similarity_fn_name", None) or "cosine"
        self.similarity = getattr(similarity, "value", similarity)  # an enum member
        if self.similarity not in SIMILARITIES:
            raise SpanInputError(f"similarity_fn_name must be one of {SIMILARITIES}, got {self.similarity!r}.")
        check_overlap(overlap)
        self.scorer = search_scorer(options["scorer"])
        if self.similarity != "cosine":  # a scorer's costs are in cosine units: rank by the plain similarity
            self.scorer = dataclasses.replace(resolve_scorer("max-cosine"), name=f"max-{self.similarity}")
        prompt = resolve_prompt(model, options["query_prompt"], options["query_prompt_name"], "query")
        shared = {name: options[name] for name in ("batch_size", "window_context", "device")}
        self.dim = _truncate_dim(model)  # spans and queries compared in the model's truncated space, as encode does
        self.queries = embed_texts(model, queries, show_progress_bar=False, prompt=prompt, **shared)[:, : self.dim]
        # A unit holds >= 1 token, a token >= 1 UTF-8 byte: a bound on any text's spans (lone surrogates fail later).
        units = max((len(text.encode("utf-8", "surrogatepass")) for text in texts), default=0)
        self.top_k = top_k if paired else min(top_k, max(1, units * (config.max_span - config.min_span + 1)))
        self.profiles = None  # (Q, 5) query profiles for the scorer's costs; a plain scorer pays none
        if not self.scorer.is_plain:
            lengths = [len(starts) for starts, _, _ in text_units(model.tokenizer, queries, config.unit)]
            self.profiles = torch.from_numpy(query_profiles(queries, lengths))
        self.rerank = rerank_context(self.scorer, queries)
        self.pick_order = False  # (Q, 1): the queries whose windows' spans merge in pick order (see merge_key)
        if self.rerank is not None and self.profiles is not None and not paired:
            self.pick_order = self.rerank.reranker.reranks(self.profiles[:, 0].numpy())[:, None]
        shape = (1 if paired else len(queries), len(texts), self.top_k)
        self.arrays = {name: np.full(shape, -np.inf, np.float32) for name in ("scores", "similarities")}
        names = ("starts", "ends", "unit_starts", "unit_ends", "ranks")  # ranks: place among its window's picks
        self.arrays |= {name: np.full(shape, -1, np.int64) for name in names}

    def best_of_rows(self, rows: _Rows) -> BestSpans:
        """The best spans of one sub-batch of windows: the scorer's, re-ranked when ``rerank`` says so."""
        queries, profiles, config = self.queries, self.profiles, self.config
        if self.paired:  # (rows, 1, d): each window against its own text's query
            index = torch.tensor([w.text_index for w in rows.windows])
            queries = queries[index.to(queries.device)][:, None, :].to(rows.token_embeddings.device)
            profiles = None if profiles is None else profiles[index][:, None, :]
        embeddings = rows.token_embeddings[..., : self.dim]
        costs = None
        if profiles is not None:
            units, flags = _row_flags(rows, self.texts)
            costs = span_costs(self.scorer, flags, profiles, config.min_span, config.max_span)
        bounds = (rows.boundaries, rows.num_units, config.min_span, config.max_span)
        fused = functools.partial(
            best_span_scores, queries, embeddings, *bounds, owned=rows.owned, similarity=self.similarity, costs=costs
        )
        if self.rerank is None or costs is None:
            return fused(self.top_k, overlap=self.overlap)
        pairs = index.numpy()[:, None] if self.paired else np.arange(len(self.queries))[None, :]
        window = RerankRows(rows.boundaries, rows.num_units, unit_words(units, flags.shape[1]), flags, embeddings)
        return self.rerank.best(fused, self.top_k, self.overlap, window, queries, costs, profiles, pairs, config)

    def add(self, found: BestSpans, rows: _Rows) -> None:
        """Turn one sub-batch's window-level best spans into text-level offsets and merge them in."""
        missing, device = found.starts < 0, found.starts.device
        starts, last = found.starts.clamp(min=0), (found.ends - 1).clamp(min=0)
        chars = torch.tensor([w.char_start for w in rows.windows], device=device)[:, None, None]
        units = torch.tensor([w.first_unit(self.config.unit) for w in rows.windows], device=device)[:, None, None]
        candidate = {
            "starts": _gather_units(rows.char_starts, starts) + chars,
            "ends": _gather_units(rows.char_ends, last) + chars,
            "unit_starts": found.starts + units,
            "unit_ends": found.ends + units,
        }
        candidate["ranks"] = torch.arange(found.starts.shape[-1], device=device).expand_as(found.starts)
        candidate = {name: value.masked_fill(missing, -1).cpu().numpy() for name, value in candidate.items()}
        candidate["similarities"] = found.similarities.masked_fill(missing, float("-inf")).float().cpu().numpy()
        candidate["scores"] = found.scores.float().cpu().numpy()
        for row, window in enumerate(rows.windows):
            self._merge(window.text_index, {name: values[row] for name, values in candidate.items()})

    def _merge(self, text: int, new: dict[str, np.ndarray]) -> None:
        """Merge a window's ``(Q, k)`` candidates into its text's top-k (no ``overlap``: disjoint, best first)."""
        both = {name: np.concatenate([self.arrays[name][:, text], values], axis=1) for name, values in new.items()}
        merged = merge_key(both["scores"], both["ranks"], self.pick_order)
        if self.overlap or self.top_k == 1:
            order = np.argsort(-merged, axis=1, kind="stable")[:, : self.top_k]
            missing = ~np.isfinite(np.take_along_axis(merged, order, axis=1))
        else:
            bounds = (torch.from_numpy(both[name]) for name in ("unit_starts", "unit_ends"))
            order = greedy_disjoint(torch.from_numpy(merged), *bounds, self.top_k).numpy()
            missing, order = order < 0, order.clip(min=0)
        for name, values in both.items():
            kept = np.take_along_axis(values, order, axis=1)
            self.arrays[name][:, text] = np.where(missing, -1 if values.dtype.kind == "i" else -np.inf, kept)


def _row_flags(rows: _Rows, texts: Sequence[str]) -> tuple[list[list[str]], Tensor]:
    """Each window's unit strings; their ``(B, U)`` unit flags (which read whether it starts and ends its text)."""
    units, starts, ends = [], rows.char_starts.cpu().numpy(), rows.char_ends.cpu().numpy()
    flags = torch.zeros(rows.char_starts.shape, dtype=torch.long)
    for row, window in enumerate(rows.windows):
        whole, count = texts[window.text_index], int(rows.num_units[row])
        text = whole[window.char_start : window.char_end]
        units.append([text[a:b] for a, b in zip(starts[row, :count], ends[row, :count])])
        edges = not whole[: window.char_start].strip(), not whole[window.char_end :].strip()
        flags[row, :count] = torch.from_numpy(unit_flags(units[-1], *edges).astype(np.int64))
    return units, flags.to(rows.token_embeddings.device)


def _gather_units(values: Tensor, index: Tensor) -> Tensor:
    """``values (B, U)`` at ``index (B, Q, k)`` → ``(B, Q, k)``."""
    if values.shape[1] == 0:
        return torch.zeros_like(index)
    return values.gather(1, index.flatten(1)).view_as(index)


def best_spans_paired(
    model: SentenceTransformer, queries: Sequence[str], texts: Sequence[str], **options: Any
) -> list[SpanMatch | None]:
    """The best span of ``texts[i]`` for ``queries[i]``, for each pair ``i``: :func:`best_spans` scoring only the N
    pairs instead of all N × N (the evaluation setting: an origin phrase and its passage).

    Args:
        queries: One query per text.
        texts: The texts, paired with ``queries`` by position.
        options: Keyword options of :func:`best_spans`, but ``top_k``, ``overlap`` and ``on_error``.

    Returns:
        A :class:`SpanMatch` per pair (``None`` for a text without spans), ``query_index == text_index == i``.

    Example:
        >>> from slice_st import load_model
        >>> matches = best_spans_paired(load_model(), ["a dog"], ["The cat and the puppy slept."], max_span=3)
        >>> matches[0].span
        'the puppy'
    """
    unknown = sorted(set(options) - set(_PAIRED_OPTIONS))
    if unknown:
        raise SpanInputError(f"best_spans_paired has no option {unknown[0]!r}; it takes {', '.join(_PAIRED_OPTIONS)}.")
    query_list, text_list = as_text_list(queries, "queries")[0], as_text_list(texts)[0]
    if len(query_list) != len(text_list):
        raise SpanInputError(f"queries and texts must pair up: {len(query_list)} queries, {len(text_list)} texts.")
    if not query_list:
        return []
    result = _best_spans(model, query_list, text_list, 1, paired=True, errors=None, **_PAIRED_OPTIONS | options)
    return [
        dataclasses.replace(result._match(0, i, 0), query_index=i) if np.isfinite(result.scores[0, i, 0]) else None
        for i in range(len(query_list))
    ]


#: best_spans_paired's options: best_spans' keyword options and defaults, but those that pick several spans.
_PAIRED_OPTIONS = {
    name: parameter.default
    for name, parameter in inspect.signature(best_spans).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("top_k", "overlap", "on_error")
}


def attach_methods() -> None:
    """Make ``encode_spans``/``encode_span_queries``/``best_spans`` methods of every ``SentenceTransformer`` (never
    clobbering ST's own); ``import slice_st`` arranges for this to run when ``sentence_transformers`` is imported."""
    from sentence_transformers import SentenceTransformer

    for function in (encode_spans, encode_span_queries, best_spans):
        existing = getattr(SentenceTransformer, function.__name__, None)
        if existing is None or getattr(existing, "__module__", "").startswith("slice_st"):
            setattr(SentenceTransformer, function.__name__, function)
