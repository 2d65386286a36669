"""Span encoding: ``encode_spans`` and ``encode_span_queries``, one forward pass per text (long texts cut into windows),
then every span is a cheap mean; the windows that :mod:`slice_st.search` scores. Methods of
:class:`slice_st.SpanEncoder` (and of ``SentenceTransformer`` once :mod:`slice_st` is imported).

``model`` is a ``SentenceTransformer`` with a fast tokenizer (e.g. from :func:`slice_st.load_model`). Options shared by
these functions, as in ``SentenceTransformer.encode_document`` / ``encode_query``: ``prompt_name``/``prompt`` pick the
texts' prompt (``query_prompt_name``/``query_prompt`` the queries'), whose tokens condition the others but belong to no
span. ``min_span``/``max_span``/``unit`` (``"word"`` or ``"token"``) default to the model's span settings
(:func:`slice_st.get_span_config`), ``max_span`` capped at one model window. ``batch_size`` counts windows per forward
pass; ``show_progress_bar=None`` shows one for long inputs only; ``device`` goes to ``model.encode``. Texts longer than
the model's window are split into overlapping windows with ``window_context`` units of context on each side of the spans
a window owns. Empty texts have no spans; anything that is not a string raises :class:`SpanInputError`.

``model`` may also be a sentence-transformers ``MultiVectorEncoder`` (ColBERT / PyLate style): its token vectors (after
its projection and normalisation) are the ones pooled, documents and queries encoded as ``encode_document`` and
``encode_query`` encode them (their prompts or markers, lengths and query expansion); the tokens its
``MultiVectorMask`` leaves out of scoring (a skiplist) are left out of every span's mean. :func:`is_multi_vector` and
:func:`_scored_tokens` hold the rule.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from slice_st._checks import as_text_list, check_device, check_top_k
from slice_st.config import SpanConfig, check_tokenizer, get_span_config
from slice_st.errors import ModelLoadError, SpanInputError, SpanPoolingWarning, WindowError
from slice_st.spans import SIMILARITIES, pool_spans, pool_units
from slice_st.tokens import (
    SPAN_PROCESSING_KWARGS,
    WINDOW_CONTEXT,
    Window,
    plan_windows,
    tokenizer_lock,
    unit_boundaries,
)

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["SpanEncoding", "encode_spans", "encode_span_queries", "embed_texts"]

#: Windows sent to one ``model.encode`` call, and at most about this many tokens: bounds memory (the call's token
#: vectors, twice) while keeping its length sorting useful.
WINDOWS_PER_CALL = 1024
TOKENS_PER_CALL = 65_536
#: ``precision`` values, as in ``SentenceTransformer.encode``.
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
#: Prompt names used for the texts whose spans are taken, in order (as ``SentenceTransformer.encode_document``).
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")


def resolve_prompt(
    model: SentenceTransformer,
    prompt: str | None = None,
    prompt_name: str | None = None,
    role: str = "document",
) -> str:
    """The prompt text of one side (``""``: none), chosen as ``encode_query``/``encode_document`` choose it."""
    if prompt is not None:
        if not isinstance(prompt, str):
            raise SpanInputError(f"prompt must be a string, got {type(prompt).__name__}.")
        return prompt
    prompts = getattr(model, "prompts", None) or {}
    if prompt_name is not None and prompt_name not in prompts:
        raise SpanInputError(
            f"prompt_name {prompt_name!r} is not one of the model's prompts: {sorted(prompts)}."
        )
    names = ["query"] if role == "query" else [*DOCUMENT_PROMPT_NAMES]
    if prompt_name is not None:
        names = [prompt_name]
    names.append(getattr(model, "default_prompt_name", None))
    return next((prompts[name] or "" for name in names if name is not None and name in prompts), "")


_CHECKED_POOLING: weakref.WeakSet = weakref.WeakSet()


def check_span_pooling(model: SentenceTransformer) -> None:
    """Warn (once per model) when the model's sentence embedding is not the mean of its token vectors."""
    target = getattr(model, "_model", model)  # a PooledEncoder stands for its model
    with contextlib.suppress(TypeError):  # not weak-referenceable: check every time
        if target in _CHECKED_POOLING:
            return
        _CHECKED_POOLING.add(target)
    modules = list(target) if isinstance(target, Iterable) else []
    pooling = [
        hasattr(m, "pooling_mode") or getattr(m, "provides_span_embeddings", False) is True
        for m in modules
    ]
    if not any(pooling):
        return
    position = pooling.index(True)
    mode = getattr(modules[position], "pooling_mode", "mean")
    modes = (mode,) if isinstance(mode, str) else tuple(mode)
    names = [type(module).__name__ for module in modules[position + 1 :]]
    after = [name for name in names if name != "Normalize"]
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


def check_truncate_dim(
    model: SentenceTransformer, truncate_dim: int | None = None, precision: str = "float32"
) -> int | None:
    """Check ``precision``; ``truncate_dim`` (else the model's, as ``encode``) checked, ``None``: no truncation."""
    if precision not in PRECISIONS:
        raise SpanInputError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
    truncate_dim = getattr(model, "truncate_dim", None) if truncate_dim is None else truncate_dim
    if truncate_dim is None:
        return None
    dim = token_dimension(model)
    if (
        isinstance(truncate_dim, bool)
        or not isinstance(truncate_dim, int)
        or not 1 <= truncate_dim <= dim
    ):
        raise SpanInputError(f"truncate_dim must be an integer in 1..{dim}, got {truncate_dim!r}.")
    return truncate_dim


def resolve_span_config(model: SentenceTransformer, min_span, max_span, unit) -> SpanConfig:
    """The model's span settings with the given overrides; ``max_span`` capped at one model window."""
    config = get_span_config(model).replace(min_span=min_span, max_span=max_span, unit=unit)
    window = model_window(model)
    if config.min_span > window:
        raise SpanInputError(
            f"min_span={config.min_span} is longer than a model window ({window} tokens)."
        )
    return config.replace(max_span=window) if config.max_span > window else config


def is_multi_vector(model: SentenceTransformer) -> bool:
    """Whether ``model`` is a sentence-transformers ``MultiVectorEncoder`` (ColBERT / PyLate style: one vector per
    token, scored by MaxSim), read from its ``model_type`` so that asking imports nothing."""
    return getattr(model, "model_type", None) == "MultiVectorEncoder"


def model_window(model: SentenceTransformer, role: str = "document") -> int:
    """Content tokens per window: the model's max_seq_length minus the special tokens it adds; a ``MultiVectorEncoder``
    also within its length for the ``role`` (``document_length``; ``query_length`` or a fixed query expansion's)."""
    tokenizer = model.tokenizer
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        raise SpanInputError(
            "Span encoding needs a model with a fast (Rust) tokenizer to get character offsets."
        )
    max_length = min(
        int(model.max_seq_length or getattr(tokenizer, "model_max_length", None) or 512), 1_000_000
    )
    # its Transformer truncates each role's texts to these lengths: windows must fit
    if is_multi_vector(model):
        module = model[0]
        length = getattr(module, "document_length" if role == "document" else "query_length", None)
        expansion = getattr(module, "query_expansion", None) if role == "query" else None
        # one expansion token left, as in a short query
        if expansion and expansion.get("strategy") == "fixed":
            length = expansion["length"] - 1
        max_length = min(max_length, length or max_length)
    check_tokenizer(model)
    return max_length - tokenizer.num_special_tokens_to_add(pair=False)


def token_dimension(model: SentenceTransformer) -> int:
    """Dimension of the token vectors (span vectors have it too, whatever ``truncate_dim`` says): the transformer's,
    a ``MultiVectorEncoder``'s after its projection."""
    dimension = (model if is_multi_vector(model) else model[0]).get_embedding_dimension()
    if dimension is None:
        raise ModelLoadError("The model's modules do not say the dimension of their token vectors.")
    return dimension


def span_similarity(model: SentenceTransformer, similarity_fn_name: str | None = None) -> str:
    """The similarity that scores spans: ``similarity_fn_name``, else the model's, else cosine. A
    ``MultiVectorEncoder``'s own (MaxSim) is left for cosine: MaxSim over a span's tokens never falls as the span
    grows (each query token keeps its best match), so it cannot choose where a span ends."""
    if similarity_fn_name is None and is_multi_vector(model):
        return "cosine"
    similarity = similarity_fn_name or getattr(model, "similarity_fn_name", None) or "cosine"
    similarity = getattr(similarity, "value", similarity)  # an enum member
    if similarity in ("maxsim", "meanmaxsim"):
        raise SpanInputError(
            f"similarity_fn_name={similarity!r} cannot rank spans: MaxSim over a span's tokens never falls as the span "
            f"grows, so the longest span always wins. Spans are scored by the {', '.join(SIMILARITIES)} of their "
            "mean token vectors (default: cosine)."
        )
    if similarity not in SIMILARITIES:
        raise SpanInputError(
            f"similarity_fn_name must be one of {SIMILARITIES}, got {similarity!r}."
        )
    return similarity


@dataclass
class WindowRows:
    """Encoded windows, padded: token embeddings, units (as ``UnitBoundaries``), span starts ``owned`` ``(lo, hi)``;
    ``token_weights`` ``(B, T)``: 0 for the tokens a ``MultiVectorEncoder`` leaves out of scoring (their vectors zero),
    ``None``: every token counts."""

    windows: list[Window]
    token_embeddings: Tensor
    boundaries: Tensor
    num_units: Tensor
    owned: tuple[Tensor, Tensor]
    char_starts: Tensor
    char_ends: Tensor
    token_weights: Tensor | None = None

    def rows(self, size: int) -> Iterator[WindowRows]:
        """Sub-batches of ``size`` windows of similar length, trimmed to their own padding."""
        order = torch.argsort(self.boundaries[:, -1], descending=True).tolist()
        for start in range(0, len(order), size):
            index = order[start : start + size]
            num_units = self.num_units[index]
            width = int(num_units.max()) if index else 0
            boundaries = self.boundaries[index, : width + 1]
            length = max(int(boundaries[:, -1].max()), 1)
            windows = [self.windows[i] for i in index]
            owned = (self.owned[0][index], self.owned[1][index])
            chars = self.char_starts[index, :width], self.char_ends[index, :width]
            weights = None if self.token_weights is None else self.token_weights[index, :length]
            vectors = self.token_embeddings[index, :length]
            yield WindowRows(windows, vectors, boundaries, num_units, owned, *chars, weights)


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
    role: str = "document",
) -> Iterator[WindowRows]:
    """Plan windows (the one check of ``batch_size``, ``window_context``, ``device``); yield padded sub-batches from
    ``model.encode``, ``prompt`` marked special; ``role`` (``"document"`` or ``"query"``) is the ``task``, as
    ``encode_document`` / ``encode_query`` set it. Uncuttable texts raise first, or go to ``errors`` (index, reason)."""
    check_top_k(batch_size, "batch_size")
    if (
        isinstance(window_context, bool)
        or not isinstance(window_context, int)
        or window_context < 0
    ):
        raise SpanInputError(
            f"window_context must be a non-negative integer, got {window_context!r}."
        )
    check_span_pooling(model)
    # "cuda" on a CPU-only torch: a clear error, not torch's bare AssertionError
    device = check_device(device)
    window = model_window(model, role)
    room = window - _prompt_tokens(model, prompt)
    if room < 1:
        raise SpanInputError(
            f"The prompt {prompt!r} leaves no room for text in the model's window of {window} tokens."
        )
    bad: list[tuple[int, str]] = [] if errors is None else errors
    windows = plan_windows(
        model.tokenizer,
        texts,
        room,
        span_config.max_span,
        window_context,
        span_config.unit,
        errors=bad,
    )
    if bad and errors is None:
        raise WindowError(*bad[0], errors=bad)
    show = len(windows) > 4 * batch_size if show_progress_bar is None else show_progress_bar
    multi_vector = is_multi_vector(model)

    # the checks above run at the call, the encoding when iterated
    def batches() -> Iterator[WindowRows]:
        with tqdm(total=len(windows), desc=desc, unit="window", disable=not show) as progress:
            for chunk in _calls(windows):
                # stripped: ST strips too
                strings = [texts[w.text_index][w.char_start : w.char_end] for w in chunk]
                with tokenizer_lock(model.tokenizer):
                    outputs: list[dict[str, Any]] = model.encode(  # type: ignore[assignment]  # a dict per string
                        strings,
                        output_value=None,
                        processing_kwargs=SPAN_PROCESSING_KWARGS,
                        prompt=prompt,  # "" also keeps the model's default_prompt_name away
                        batch_size=batch_size,
                        show_progress_bar=False,
                        device=device,
                        # as encode_document / encode_query: a Router's route, a MultiVectorEncoder's lengths
                        task=role,
                    )
                if multi_vector:
                    outputs = [_scored_tokens(out) for out in outputs]
                if prompt:
                    outputs = [_without_prompt(out, prompt) for out in outputs]
                padded = _pad_window_outputs(chunk, strings, outputs, span_config.unit)
                yield from padded.rows(batch_size)
                progress.update(len(chunk))

    return batches()


def _prompt_tokens(model: SentenceTransformer, prompt: str) -> int:
    """The tokens ``prompt`` takes in a window."""
    if not prompt:
        return 0
    with tokenizer_lock(model.tokenizer):
        return len(model.tokenizer(prompt, add_special_tokens=False)["input_ids"])


def _scored_tokens(out: dict[str, Any]) -> dict[str, Any]:
    """A ``MultiVectorEncoder`` window's outputs as span units read them. Its ``MultiVectorMask`` rewrote
    ``attention_mask`` into the scoring mask (skiplisted tokens out, query expansion in): that mask becomes the token
    weights (the vectors of tokens out of scoring zeroed), and the attention mask is every position again, padding and
    expansion tokens being special tokens (the tokenizer's ``special_tokens_mask``) outside every unit."""
    scored = out["attention_mask"].bool()
    vectors = out["token_embeddings"]
    return {
        **out,
        "token_embeddings": torch.where(scored[:, None], vectors, torch.zeros_like(vectors)),
        "token_weights": scored.to(vectors.dtype),
        "attention_mask": torch.ones_like(out["attention_mask"], dtype=torch.long),
    }


def _calls(windows: list[Window]) -> Iterator[list[Window]]:
    """``windows`` in runs of at most ``WINDOWS_PER_CALL`` windows and about ``TOKENS_PER_CALL`` tokens (a short
    text's window, not tokenized while planning, counts its characters)."""
    start, tokens = 0, 0
    for end, window in enumerate(windows):
        size = window.num_tokens if window.num_tokens >= 0 else window.char_end - window.char_start
        if end > start and (end - start == WINDOWS_PER_CALL or tokens + size > TOKENS_PER_CALL):
            yield windows[start:end]
            start, tokens = end, 0
        tokens += size
    if start < len(windows):
        yield windows[start:]


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
        "offset_mapping": torch.where(
            outside[:, None], torch.zeros_like(offsets), offsets - len(prompt)
        ),
    }


def _pad(outputs: list[dict[str, Tensor]], key: str, padding_value: float = 0) -> Tensor:
    return torch.nn.utils.rnn.pad_sequence(
        [out[key] for out in outputs], batch_first=True, padding_value=padding_value
    )


def _pad_window_outputs(
    windows: list[Window], strings: list[str], outputs: list[dict], unit: str
) -> WindowRows:
    vectors = _pad(outputs, "token_embeddings")
    # else every score is NaN and every search finds "no match"
    if not bool(torch.isfinite(vectors).all()):
        row = int((~torch.isfinite(vectors)).flatten(1).any(1).nonzero()[0, 0])
        raise ModelLoadError(
            f"The model gives NaN or infinite token vectors (text {windows[row].text_index}): its weights are "
            "broken (a damaged checkpoint or adapter, or an overflow in half precision)."
        )
    weights = _pad(outputs, "token_weights") if "token_weights" in outputs[0] else None
    masks = _pad(outputs, "attention_mask"), _pad(outputs, "special_tokens_mask", 1)
    units = unit_boundaries(*masks, _pad(outputs, "offset_mapping"), unit, strings)
    device = units.num_units.device
    expected = torch.tensor(
        [w.num_words if unit == "word" else w.num_tokens for w in windows], device=device
    )
    planned = expected >= 0  # short texts are not tokenized while planning (-1): nothing to check
    if not torch.equal(units.num_units[planned], expected[planned]):
        row = int(((units.num_units != expected) & planned).nonzero()[0, 0])
        raise RuntimeError(
            f"Window {row} of text {windows[row].text_index} tokenized into {int(units.num_units[row])} {unit}s "
            f"inside the model but {int(expected[row])} when planned; the model's tokenization of a text "
            "fragment differs from that of the whole text (prompts or a custom preprocess?)."
        )
    # Owned span starts [lo, hi): units whose first character lies in the window's owned range.
    window_starts = torch.tensor([w.char_start for w in windows], device=device)
    unit_chars = units.char_starts + window_starts[:, None]
    exists = torch.arange(unit_chars.shape[1], device=device)[None, :] < units.num_units[:, None]
    owned = tuple(
        ((unit_chars < torch.tensor(bounds, device=device)[:, None]) & exists).sum(dim=1)
        for bounds in ([w.own_char_lo for w in windows], [w.own_char_hi for w in windows])
    )
    chars = units.char_starts, units.char_ends
    return WindowRows(windows, vectors, units.boundaries, units.num_units, owned, *chars, weights)


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


@overload
def encode_spans(model: SentenceTransformer, texts: str, **options: Any) -> SpanEncoding: ...
@overload
def encode_spans(
    model: SentenceTransformer, texts: Sequence[str], **options: Any
) -> list[SpanEncoding]: ...
def encode_spans(  # type: ignore[misc]  # the overloads say what comes back; the options are checked here
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
    truncate_dim = check_truncate_dim(model, truncate_dim, precision)
    text_list, single = as_text_list(texts)
    span_config = resolve_span_config(model, min_span, max_span, unit)
    prompt_text = resolve_prompt(model, prompt, prompt_name, "document")
    windows = encode_windows(
        model,
        text_list,
        span_config,
        batch_size,
        show_progress_bar,
        window_context,
        prompt=prompt_text,
        device=device,
    )
    per_text: list[list[tuple[int, Tensor, Tensor, Tensor]]] = [[] for _ in text_list]
    for rows in windows:
        for text_index, part in _window_spans(rows, span_config, truncate_dim):
            per_text[text_index].append(part)
    dim = truncate_dim or token_dimension(model)
    no_spans = [torch.zeros(0, 2, dtype=torch.long)] * 2 + [
        torch.zeros(0, dim, device=device or model.device)
    ]
    columns = [  # each text's (offsets, units, vectors), its windows in text order
        [
            torch.cat(column)
            for column in zip(*(part[1:] for part in sorted(parts, key=lambda part: part[0])))
        ]
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


def _window_spans(rows: WindowRows, span_config: SpanConfig, truncate_dim: int | None):
    """Each window's spans: ``(text index, (first owned character, offsets, units, vectors))``."""
    bounds = (rows.boundaries, rows.num_units, span_config.min_span, span_config.max_span)
    pooled = pool_spans(rows.token_embeddings, *bounds, rows.owned, weights=rows.token_weights)
    vectors = pooled.embeddings[..., :truncate_dim]
    char_starts = rows.char_starts[:, pooled.starts]
    char_ends = rows.char_ends[:, (pooled.ends - 1).clamp(min=0)]
    for row, window in enumerate(rows.windows):
        keep = pooled.mask[row]
        chars = torch.stack([char_starts[row][keep], char_ends[row][keep]], dim=1)
        offsets = chars + window.char_start
        first_unit = window.first_unit(span_config.unit)
        units = torch.stack([pooled.starts[keep], pooled.ends[keep]], dim=1) + first_unit
        yield window.text_index, (window.own_char_lo, offsets, units, vectors[row][keep])


def _output_vectors(vectors: list[Tensor], normalize: bool, precision: str, to_numpy: bool) -> list:
    """``encode``'s vector options: normalized, quantized together (int8 ranges from all), numpy or torch."""
    from sentence_transformers import quantize_embeddings

    if normalize:
        vectors = [torch.nn.functional.normalize(v, dim=-1) for v in vectors]
    if precision != "float32" and vectors:
        try:
            vectors = [
                torch.from_numpy(np.ascontiguousarray(v))
                for v in quantize_embeddings(vectors, precision)
            ]
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
    # a query is one whole span: its windows need no room for spans
    config = SpanConfig(1, 1, "word")
    options = {"prompt": prompt, "device": device, "role": "query"}
    windows = encode_windows(
        model,
        text_list,
        config,
        batch_size,
        show_progress_bar,
        window_context,
        "Encoding queries",
        **options,
    )
    totals = torch.zeros(len(text_list), token_dimension(model), device=device or model.device)
    counts = torch.zeros(len(text_list), device=totals.device)
    for rows in windows:
        index = torch.tensor([w.text_index for w in rows.windows], device=totals.device)
        total, count = pool_units(
            rows.token_embeddings, rows.boundaries, *rows.owned, weights=rows.token_weights
        )
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
) -> np.ndarray | Tensor:
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
    truncate_dim = check_truncate_dim(model, truncate_dim, precision)
    prompt_text = resolve_prompt(model, prompt, prompt_name, "query")
    options = {
        "batch_size": batch_size,
        "show_progress_bar": show_progress_bar,
        "window_context": window_context,
    }
    vectors = embed_texts(model, queries, prompt=prompt_text, device=device, **options)
    vectors = vectors[:, :truncate_dim]
    to_numpy = convert_to_numpy and not convert_to_tensor
    vectors = _output_vectors([vectors], normalize_embeddings, precision, to_numpy)[0]
    return vectors[0] if isinstance(queries, str) else vectors
