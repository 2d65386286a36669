"""Units and windows: tokenizer offsets to unit boundaries (the only place that does it), long texts to windows.
A word is a whitespace-delimited run of tokens; special tokens and padding are never units."""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from slice_st.errors import SpanInputError, WindowError

UNITS = ("word", "token")
#: A lock per tokenizer: a fast tokenizer's padding and truncation are settings of its one Rust object, so two
#: threads tokenizing at once (two searches of one index) can pad each other's batches wrongly.
_TOKENIZER_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.RLock()  # also the lock of a tokenizer that takes no weak reference

_SPACE = re.compile(r"\s")
_LAST_SPACE = re.compile(r"(?s:.*)(\s)")  # the last whitespace character
#: ``processing_kwargs`` for ``SentenceTransformer.encode`` that make the tokenizer return what span units need
#: (tokenizer extras that sentence-transformers keeps out of the forward call).
SPAN_PROCESSING_KWARGS = {
    "text": {"return_offsets_mapping": True, "return_special_tokens_mask": True}
}


def check_unit(unit: str) -> str:
    """Return ``unit`` if it is ``"word"`` or ``"token"``, else raise a :class:`~slice_st.errors.SpanInputError`."""
    if unit not in UNITS:
        raise SpanInputError(f"unit must be one of {UNITS}, got {unit!r}.")
    return unit


@dataclass
class UnitBoundaries:
    """Units of a padded batch (conventions: :mod:`slice_st.spans`): ``boundaries`` ``(B, U + 1)`` token positions,
    ``num_units`` ``(B,)``, and each unit's character offsets ``char_starts``/``char_ends`` ``(B, U)``."""

    boundaries: Tensor
    num_units: Tensor
    char_starts: Tensor
    char_ends: Tensor


def unit_boundaries(
    attention_mask: Any,
    special_tokens_mask: Any,
    offset_mapping: Any,
    unit: str = "word",
    texts: Sequence[str] | None = None,
) -> UnitBoundaries:
    """Unit boundaries of a padded batch from the tokenizer's masks and offsets. With the tokenized ``texts``, a word
    is a whole whitespace-delimited run (with characters the tokenizer dropped); without them (inside a model), a word
    starts wherever two tokens' offsets do not touch."""
    check_unit(unit)
    missing = special_tokens_mask is None, offset_mapping is None
    if all(missing) or unit == "word" and any(missing):
        raise ValueError(
            "Span units need the tokenizer's special_tokens_mask and offset_mapping (token units: one of them): "
            "tokenize with slice_st.tokens.SPAN_PROCESSING_KWARGS."
        )
    offsets = None if offset_mapping is None else offset_mapping.long()
    content = attention_mask.bool()
    if special_tokens_mask is not None:
        content &= ~special_tokens_mask.bool()
    batch, length = content.shape
    run_starts = content & ~torch.nn.functional.pad(content, (1, 0))[:, :-1]
    if bool((run_starts.sum(dim=1) > 1).any()):
        raise ValueError(
            "Special tokens inside a text are not supported: content tokens must be contiguous."
        )
    if unit == "token":
        is_start = content
    else:
        previous_end = torch.nn.functional.pad(offsets[:, :, 1], (1, 0))[:, :-1]
        if texts is None:
            separated = offsets[:, :, 0] > previous_end
        else:
            spaces = _space_prefix_counts(texts, content.device)  # (B, L + 1)
            end = spaces.shape[1] - 1
            spaces_before = spaces.gather(1, previous_end.clamp(0, end))
            separated = spaces.gather(1, offsets[:, :, 0].clamp(0, end)) > spaces_before
        is_start = content & (run_starts | separated)
    num_units = is_start.sum(dim=1)
    positions = torch.arange(length, device=content.device).expand(batch, length)
    after_content = torch.where(content, positions + 1, 0)
    content_end = torch.nn.functional.pad(after_content, (1, 0)).amax(dim=1)
    width = int(num_units.max()) if batch else 0
    boundaries = content_end[:, None].repeat(1, width + 1)
    rows, columns = is_start.nonzero(as_tuple=True)
    boundaries[rows, (is_start.long().cumsum(dim=1) - 1)[rows, columns]] = columns
    if offsets is None or length == 0:
        char_starts = char_ends = torch.zeros(batch, width, dtype=torch.long, device=content.device)
    else:
        char_starts = offsets[:, :, 0].gather(1, boundaries[:, :-1].clamp(max=length - 1))
        char_ends = offsets[:, :, 1].gather(1, (boundaries[:, 1:] - 1).clamp(min=0, max=length - 1))
        if texts is not None and unit == "word":
            char_starts, char_ends = _snap_to_whitespace(texts, char_starts, char_ends, num_units)
    return UnitBoundaries(boundaries, num_units, char_starts, char_ends)


def _space_positions(text: str) -> np.ndarray:
    return np.fromiter((match.start() for match in _SPACE.finditer(text)), dtype=np.int64)


def _space_prefix_counts(texts: Sequence[str], device) -> Tensor:
    """``(B, L + 1)``: number of whitespace characters before each position of each text."""
    counts = np.zeros((len(texts), max(map(len, texts), default=0) + 1), dtype=np.int64)
    for row, text in enumerate(texts):
        counts[row, _space_positions(text) + 1] = 1
    return torch.from_numpy(counts.cumsum(axis=1)).to(device)


def _snap_to_whitespace(
    texts: Sequence[str], starts: Tensor, ends: Tensor, num_units: Tensor
) -> tuple[Tensor, Tensor]:
    """Widen each word's character range to its whole whitespace-delimited run."""
    starts_np, ends_np = starts.cpu().numpy().copy(), ends.cpu().numpy().copy()
    for row, (text, count) in enumerate(zip(texts, num_units.tolist())):
        # the spaces, and both ends of the text
        bounds = np.concatenate([[-1], _space_positions(text), [len(text)]])
        starts_np[row, :count] = bounds[np.searchsorted(bounds, starts_np[row, :count]) - 1] + 1
        ends_np[row, :count] = bounds[np.searchsorted(bounds, ends_np[row, :count])]
    return torch.from_numpy(starts_np).to(starts.device), torch.from_numpy(ends_np).to(ends.device)


@dataclass(frozen=True)
class Window:
    """``text[char_start:char_end]``, a piece of one text that fits the model: words ``first_word`` + ``num_words``,
    tokens ``first_token`` + ``num_tokens`` (-1: a short text, not tokenized while planning). Its spans start in
    ``[own_char_lo, own_char_hi)``, so each span of the text comes from one window. Offsets are in the whole text."""

    text_index: int
    char_start: int
    char_end: int
    first_word: int
    num_words: int
    first_token: int
    num_tokens: int
    own_char_lo: int
    own_char_hi: int

    def first_unit(self, unit: str) -> int:
        """Index, in the whole text, of this window's first unit."""
        return self.first_word if unit == "word" else self.first_token


def tokenizer_lock(tokenizer: Any) -> threading.RLock:
    """The lock held while ``tokenizer`` runs (or ``model.encode`` runs it)."""
    with _LOCKS_LOCK:
        try:
            return _TOKENIZER_LOCKS.setdefault(tokenizer, threading.RLock())
        except TypeError:
            return _LOCKS_LOCK


def text_units(
    tokenizer: Any, texts: Sequence[str], unit: str = "word"
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per text (tokenized whole): unit char starts, unit char ends and tokens per unit, as inside the model.

    >>> from transformers import AutoTokenizer
    >>> from slice_st.loading import default_model_path
    >>> starts, ends, counts = text_units(AutoTokenizer.from_pretrained(default_model_path()), ["I ❤️ guitars."])[0]
    >>> starts.tolist(), ends.tolist(), counts.tolist()
    ([0, 2, 5], [1, 4, 13], [1, 1, 2])
    """
    if not texts:
        return []
    with tokenizer_lock(tokenizer):
        encoded = tokenizer(
            list(texts), add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
    offsets = [
        torch.tensor(offsets, dtype=torch.long).reshape(-1, 2)
        for offsets in encoded["offset_mapping"]
    ]
    mask = torch.nn.utils.rnn.pad_sequence(
        [torch.ones(len(o), dtype=torch.long) for o in offsets], batch_first=True
    )
    padded = torch.nn.utils.rnn.pad_sequence(offsets, batch_first=True)
    units = unit_boundaries(mask, torch.zeros_like(mask), padded, unit, texts)
    starts, ends = units.char_starts.numpy(), units.char_ends.numpy()
    counts = units.boundaries.diff(dim=1).numpy()
    return [
        (starts[row, :n], ends[row, :n], counts[row, :n])
        for row, n in enumerate(units.num_units.tolist())
    ]


def _token_groups(
    tokenizer, texts: Sequence[str], max_tokens: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Planning units for ``unit="token"``: runs of one pre-tokenizer word's tokens (windows cut between them tokenize
    as inside the whole text); a run longer than a window is cut between its tokens."""
    if not texts:
        return []
    with tokenizer_lock(tokenizer):
        encoded = tokenizer(
            list(texts), add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
    groups = []
    for row, offsets in enumerate(encoded["offset_mapping"]):
        word_ids = encoded.word_ids(row)
        starts, ends, counts = [], [], []
        previous = object()
        for (start, end), word in zip(offsets, word_ids):
            if word is None or word != previous or counts[-1] >= max_tokens:
                starts.append(start)
                ends.append(end)
                counts.append(1)
            else:
                ends[-1] = max(ends[-1], end)
                counts[-1] += 1
            previous = word
        groups.append(
            tuple(np.asarray(values, dtype=np.int64) for values in (starts, ends, counts))
        )
    return groups


#: Units of context kept on each side of the spans a window owns (``window_context`` everywhere).
WINDOW_CONTEXT = 16


def plan_windows(
    tokenizer: Any,
    texts: Sequence[str],
    max_tokens: int,
    max_span: int,
    context: int = WINDOW_CONTEXT,
    unit: str = "word",
    errors: list[tuple[int, str]] | None = None,
) -> list[Window]:
    """Split texts into windows of at most ``max_tokens`` content tokens, cut between units: every span of up to
    ``max_span`` units lies in the window that owns it, with up to ``context`` units on each side. A text that cannot
    be cut (a word or ``max_span`` units longer than a window, or not valid Unicode) raises :class:`WindowError`; with
    an ``errors`` list it is appended there as ``(text index, reason)`` and gets no window instead."""
    check_unit(unit)
    if max_tokens < 1:
        raise ValueError(
            f"The model window must hold at least one token, got max_tokens={max_tokens}."
        )
    windows: list[Window] = []

    def failed(error: WindowError) -> None:
        if errors is None:
            raise error
        errors.append((error.text_index, error.reason))

    # Every token covers at least one UTF-8 byte of the text, so a text of few enough bytes fits one
    # window without tokenizing it here (its counts, -1, are then taken from the model's own pass).
    to_plan = []
    for text_index, text in enumerate(texts):
        stripped = text.strip()
        try:
            size = len(stripped.encode("utf-8"))
        # a lone surrogate (e.g. "\\ud800" in JSON): no tokenizer takes it
        except UnicodeEncodeError as error:
            where = f"({text[error.start]!r}) at character {error.start}"
            reason = f"holds a lone surrogate {where}: not valid Unicode text; fix or drop it."
            failed(WindowError(text_index, reason))
            continue
        if stripped and size + 2 <= max_tokens:
            start = len(text) - len(text.lstrip())
            windows.append(
                Window(text_index, start, start + len(stripped), 0, -1, 0, -1, 0, len(text))
            )
        elif stripped:
            to_plan.append(text_index)
    planned = _planning_units(tokenizer, [texts[i] for i in to_plan], max_tokens, unit)
    for text_index, units in zip(to_plan, planned):
        try:
            windows.extend(
                _text_windows(
                    texts[text_index], text_index, units, max_tokens, max_span, context, unit
                )
            )
        except WindowError as error:
            failed(error)
    windows.sort(key=lambda window: (window.text_index, window.char_start))
    if errors is not None:
        errors.sort()
    return windows


#: Planning tokenizes a long text in pieces of about this many characters, cut at whitespace, and at most
#: ``PLAN_GROUP_CHARS`` padded characters of pieces at once: its memory stays bounded however long a text is.
PLAN_PIECE_CHARS = 20_000
PLAN_GROUP_CHARS = 1_000_000


def _pieces(text: str) -> Iterator[tuple[int, str]]:
    """``(offset, piece)``: ``text`` cut before a whitespace character about every ``PLAN_PIECE_CHARS`` characters
    (units never cross whitespace, so the pieces' units are the text's); a run without whitespace is not cut."""
    start = 0
    while len(text) - start > PLAN_PIECE_CHARS:
        found = _LAST_SPACE.match(text, start + 1, start + PLAN_PIECE_CHARS)
        found = found or _SPACE.search(text, start + 1)
        if found is None:
            break
        cut = found.start(found.lastindex or 0)
        yield start, text[start:cut]
        start = cut
    yield start, text[start:]


def _planning_units(
    tokenizer, texts: Sequence[str], max_tokens: int, unit: str
) -> Iterator[tuple[np.ndarray, ...]]:
    """Each text's planning units (``text_units``, or ``_token_groups`` for token units), tokenized piece by piece
    (``_pieces``) in groups of at most ``PLAN_GROUP_CHARS`` padded characters, never all texts padded at once."""
    parts: dict[int, list[tuple[np.ndarray, ...]]] = {}
    pending: list[tuple[int, int, str]] = []  # (text, offset, piece) not tokenized yet
    widest, complete = 0, 0  # the texts before `complete` are yielded

    def tokenize() -> None:
        strings = [piece for *_, piece in pending]
        found = (
            _token_groups(tokenizer, strings, max_tokens)
            if unit == "token"
            else text_units(tokenizer, strings)
        )
        for (text_no, offset, _), (starts, ends, counts) in zip(pending, found):
            parts[text_no].append((starts + offset, ends + offset, counts))
        pending.clear()

    for text_no, text in enumerate(texts):
        parts[text_no] = []
        for offset, piece in _pieces(text):
            widest = max(widest, len(piece))
            if pending and (len(pending) + 1) * widest > PLAN_GROUP_CHARS:
                tokenize()
                widest = len(piece)
                for done in range(complete, text_no):
                    yield tuple(np.concatenate(arrays) for arrays in zip(*parts.pop(done)))
                complete = text_no
            pending.append((text_no, offset, piece))
    tokenize()
    for done in range(complete, len(texts)):
        yield tuple(np.concatenate(arrays) for arrays in zip(*parts.pop(done)))


def _text_windows(
    text: str,
    text_index: int,
    units: tuple[np.ndarray, ...],
    max_tokens: int,
    max_span: int,
    context: int,
    unit: str,
) -> list[Window]:
    """The windows of one text from its planning units ``(char starts, char ends, tokens)``: words, or token runs."""
    starts, ends, counts = units
    num_words = len(counts)
    if num_words == 0:
        return []
    cumulative = np.concatenate([[0], np.cumsum(counts)])
    if cumulative[-1] <= max_tokens:
        chars = int(starts[0]), int(ends[-1])
        return [Window(text_index, *chars, 0, num_words, 0, int(cumulative[-1]), 0, len(text))]
    if counts.max() > max_tokens:
        word = int(np.argmax(counts))
        raise WindowError(
            text_index,
            f"a word of {int(counts[word])} tokens ({text[starts[word] : ends[word]][:40]!r}...) is longer than the "
            f"model window of {max_tokens} tokens; split that word, raise the model's max_seq_length, or use "
            "unit='token'.",
        )
    windows, own_lo = [], 0
    while own_lo < num_words:
        # Full context on both sides if it fits, else halve it (context, context/2, …, 0) until the window owns a start
        for margin in (context >> halvings for halvings in range(context.bit_length() + 1)):
            first = max(own_lo - margin, 0)
            end_tokens = cumulative[first] + max_tokens
            last = int(np.searchsorted(cumulative, end_tokens, side="right")) - 1
            # spans end by last - margin
            own_hi = num_words if last >= num_words else last - max_span - margin + 1
            if own_hi > own_lo:
                break
        else:
            raise WindowError(
                text_index,
                f"spans of max_span={max_span} {unit}s do not fit in a model window of {max_tokens} tokens; lower "
                "max_span or raise max_seq_length.",
            )
        last = min(last, num_words)
        chars = int(starts[first]), int(ends[last - 1])
        tokens = int(cumulative[first]), int(cumulative[last] - cumulative[first])
        owned = int(starts[own_lo]), len(text) if own_hi >= num_words else int(starts[own_hi])
        windows.append(Window(text_index, *chars, first, last - first, *tokens, *owned))
        own_lo = own_hi
    return windows
