"""Units (slice_st.tokens.unit_boundaries) and windows (plan_windows), with the real MiniLM tokenizer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import texts, whitespace_words
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slice_st import SpanIndex, SpanInputError
from slice_st.tokens import (
    SPAN_PROCESSING_KWARGS,
    Window,
    check_unit,
    plan_windows,
    unit_boundaries,
)


def tokenize(tokenizer, batch: list[str]):
    return tokenizer(batch, padding=True, return_tensors="pt", **SPAN_PROCESSING_KWARGS["text"])


def token_count(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


# ---------------------------------------------------------------------------------------------
# unit_boundaries
# ---------------------------------------------------------------------------------------------


@given(batch=st.lists(texts(), min_size=1, max_size=4))
def test_word_units_are_whitespace_words_and_skip_specials(tokenizer, batch):
    encoded = tokenize(tokenizer, batch)
    units = unit_boundaries(
        encoded["attention_mask"], encoded["special_tokens_mask"], encoded["offset_mapping"], "word"
    )
    content = encoded["attention_mask"].bool() & ~encoded["special_tokens_mask"].bool()
    width = units.boundaries.shape[1] - 1
    assert units.char_starts.shape == units.char_ends.shape == (len(batch), width)
    for row, text in enumerate(batch):
        words = whitespace_words(text)
        n = int(units.num_units[row])
        assert n == len(words)
        cuts = units.boundaries[row].tolist()
        # strictly increasing over real units, then padded by repeating the last boundary
        assert all(a < b for a, b in zip(cuts[:n], cuts[1 : n + 1]))
        assert all(c == cuts[n] for c in cuts[n:])
        # the tokens inside units are exactly the content tokens: no special token, no padding
        in_units = torch.zeros_like(content[row])
        in_units[cuts[0] : cuts[n]] = True
        if n:
            assert torch.equal(in_units, content[row])
        else:
            assert not content[row].any()
        # each unit's characters are one whole whitespace word
        for u in range(n):
            assert (int(units.char_starts[row, u]), int(units.char_ends[row, u])) == words[u]


@given(batch=st.lists(texts(), min_size=1, max_size=4))
def test_token_units_are_content_tokens(tokenizer, batch):
    encoded = tokenize(tokenizer, batch)
    units = unit_boundaries(
        encoded["attention_mask"],
        encoded["special_tokens_mask"],
        encoded["offset_mapping"],
        "token",
    )
    content = encoded["attention_mask"].bool() & ~encoded["special_tokens_mask"].bool()
    for row, text in enumerate(batch):
        positions = content[row].nonzero().flatten().tolist()
        n = int(units.num_units[row])
        assert n == len(positions) == token_count(tokenizer, text)
        if n:
            assert units.boundaries[row, : n + 1].tolist() == positions + [positions[-1] + 1]
            offsets = encoded["offset_mapping"][row]
            for u, position in enumerate(positions):
                assert int(units.char_starts[row, u]) == int(offsets[position, 0])
                assert int(units.char_ends[row, u]) == int(offsets[position, 1])


def test_unit_boundaries_doc_example():
    offsets = torch.tensor([[[0, 0], [0, 1], [2, 5], [5, 6], [0, 0]]])
    special = torch.tensor([[1, 0, 0, 0, 1]])
    units = unit_boundaries(torch.ones(1, 5, dtype=torch.long), special, offsets, "word")
    assert units.boundaries.tolist() == [[1, 2, 4]]
    assert units.num_units.tolist() == [2]
    assert units.char_starts.tolist() == [[0, 2]]
    assert units.char_ends.tolist() == [[1, 6]]


def test_word_units_never_split_contractions_or_punctuation(tokenizer):
    text = "I don't know... ok?! e.g. U.S.A. (yes)"
    encoded = tokenize(tokenizer, [text])
    units = unit_boundaries(
        encoded["attention_mask"], encoded["special_tokens_mask"], encoded["offset_mapping"], "word"
    )
    got = [text[s:e] for s, e in zip(units.char_starts[0].tolist(), units.char_ends[0].tolist())]
    assert got == text.split()


def test_padding_row_has_no_units(tokenizer):
    encoded = tokenize(tokenizer, ["a man plays", ""])
    units = unit_boundaries(
        encoded["attention_mask"], encoded["special_tokens_mask"], encoded["offset_mapping"], "word"
    )
    assert units.num_units.tolist() == [3, 0]


@pytest.mark.parametrize("unit", ["word", "token"])
def test_special_token_inside_text_is_rejected(unit):
    attention = torch.ones(1, 5, dtype=torch.long)
    special = torch.tensor([[1, 0, 1, 0, 1]])
    offsets = torch.tensor([[[0, 0], [0, 1], [0, 0], [2, 3], [0, 0]]])
    with pytest.raises(ValueError, match="contiguous"):
        unit_boundaries(attention, special, offsets, unit)


def test_word_units_need_offsets_and_special_mask():
    attention = torch.ones(1, 3, dtype=torch.long)
    special = torch.tensor([[1, 0, 1]])
    with pytest.raises(ValueError, match="offset"):
        unit_boundaries(attention, special, None, "word")
    with pytest.raises(ValueError, match="special_tokens_mask"):
        unit_boundaries(attention, None, torch.zeros(1, 3, 2, dtype=torch.long), "word")


def test_token_units_without_offsets_still_work():
    attention = torch.tensor([[1, 1, 1, 1, 0]])
    special = torch.tensor([[1, 0, 0, 1, 1]])
    units = unit_boundaries(attention, special, None, "token")
    assert units.boundaries.tolist() == [[1, 2, 3]]
    assert units.num_units.tolist() == [2]


@pytest.mark.parametrize("unit", ["char", "Word", "", None, "words"])
def test_bad_unit_is_rejected(unit):
    with pytest.raises(ValueError, match="unit must be one of"):
        check_unit(unit)
    with pytest.raises(ValueError, match="unit must be one of"):
        unit_boundaries(
            torch.ones(1, 2, dtype=torch.long), torch.zeros(1, 2), torch.zeros(1, 2, 2), unit
        )


# ---------------------------------------------------------------------------------------------
# plan_windows
# ---------------------------------------------------------------------------------------------


def word_tokens(tokenizer, text: str) -> list[int]:
    return [token_count(tokenizer, text[s:e]) for s, e in whitespace_words(text)]


def check_windows(
    tokenizer,
    batch: list[str],
    windows: list[Window],
    max_tokens: int,
    max_span: int,
    context: int | None,
):
    """Every invariant plan_windows promises; ``context`` is checked only when given."""
    for text_index, text in enumerate(batch):
        words = whitespace_words(text)
        counts = word_tokens(tokenizer, text)
        mine = [w for w in windows if w.text_index == text_index]
        if not words:
            assert mine == []
            continue
        assert mine, "a text with tokens must get a window"
        assert [w.char_start for w in mine] == sorted(w.char_start for w in mine)
        if sum(counts) <= max_tokens:
            assert len(mine) == 1
            (w,) = mine
            # short texts are not tokenized while planning: their counts are -1 (the model's pass gives them)
            assert (w.num_words, w.num_tokens) in ((len(words), sum(counts)), (-1, -1))
            assert (w.first_word, w.first_token) == (0, 0)
            assert (w.own_char_lo, w.own_char_hi) == (0, len(text))
        if any(w.num_words == -1 for w in mine):
            (w,) = mine
            assert (
                len(text.strip().encode("utf-8")) + 2 <= max_tokens
            )  # the byte bound that skips planning
            assert (w.char_start, w.char_end) == (words[0][0], words[-1][1])
            continue
        owners = [0] * len(words)
        for w in mine:
            # the window's text is exactly its words and fits the model
            first, last = w.first_word, w.first_word + w.num_words
            assert 0 <= first < last <= len(words)
            assert (w.char_start, w.char_end) == (words[first][0], words[last - 1][1])
            assert w.num_tokens == sum(counts[first:last]) <= max_tokens
            assert w.first_token == sum(counts[:first])
            assert token_count(tokenizer, text[w.char_start : w.char_end]) == w.num_tokens
            owned = [i for i, (s, _) in enumerate(words) if w.own_char_lo <= s < w.own_char_hi]
            for start in owned:
                owners[start] += 1
                for length in range(1, max_span + 1):
                    end = start + length
                    if end > len(words):
                        break
                    assert first <= start and end <= last, (w, start, end)
                    if context is not None:
                        assert first <= start - min(context, start), ("left context", w, start)
                        assert end + min(context, len(words) - end) <= last, (
                            "right context",
                            w,
                            end,
                        )
        assert owners == [1] * len(words), "every start word must be owned by exactly one window"


@settings(max_examples=60)
@given(
    batch=st.lists(texts(max_words=40), min_size=1, max_size=3),
    max_tokens=st.integers(4, 40),
    max_span=st.integers(1, 4),
    context=st.integers(0, 4),
)
def test_plan_windows_partitions_span_starts(tokenizer, batch, max_tokens, max_span, context):
    """Ownership is a partition and every owned span fits its window (any window size)."""
    longest_run = max_tokens_in_run(tokenizer, batch, max_span + context + 1)
    try:
        windows = plan_windows(tokenizer, batch, max_tokens, max_span, context)
    except ValueError as error:
        # allowed only when the library's documented (conservative) requirement cannot be met
        assert longest_run > max_tokens, (
            f"raised although every run of max_span+context+1 words fits: {error}"
        )
        assume(False)
    check_windows(tokenizer, batch, windows, max_tokens, max_span, context=None)


def max_tokens_in_run(tokenizer, batch: list[str], run: int) -> int:
    worst = 0
    for text in batch:
        counts = word_tokens(tokenizer, text)
        for i in range(len(counts)):
            worst = max(worst, sum(counts[i : i + run]))
    return worst


@settings(max_examples=60)
@given(
    batch=st.lists(texts(min_words=1, max_words=45), min_size=1, max_size=2),
    max_span=st.integers(1, 3),
    context=st.integers(0, 3),
    slack=st.integers(0, 10),
)
def test_plan_windows_keeps_context_when_window_is_big_enough(
    tokenizer, batch, max_span, context, slack
):
    """With room for max_span + 2*context + 2 words, every owned span has full context on both sides."""
    max_tokens = max_tokens_in_run(tokenizer, batch, max_span + 2 * context + 2) + slack
    windows = plan_windows(tokenizer, batch, max_tokens, max_span, context)
    check_windows(tokenizer, batch, windows, max_tokens, max_span, context=context)


def test_plan_windows_short_text_single_window(tokenizer):
    text = "  A man plays the guitar.  "
    (window,) = plan_windows(tokenizer, [text], 50, 5)
    assert window == Window(
        0, 2, 25, 0, -1, 0, -1, 0, len(text)
    )  # fits by its byte count: not tokenized here
    (window,) = plan_windows(tokenizer, [text], 24, 5)  # 23 bytes + 2 > 24: tokenized and counted
    assert window == Window(0, 2, 25, 0, 5, 0, 6, 0, len(text))


def test_plan_windows_long_text_many_windows(tokenizer):
    text = " ".join(f"word{i % 10}" for i in range(200))
    windows = plan_windows(tokenizer, [text], 30, 3, 4)
    assert len(windows) > 5
    check_windows(tokenizer, [text], windows, 30, 3, context=4)


def test_plan_windows_skips_texts_without_tokens(tokenizer):
    windows = plan_windows(tokenizer, ["", "a b", "   \n"], 10, 2)
    assert [w.text_index for w in windows] == [1]


@pytest.mark.parametrize("batch", [[""], ["", "  \t"], []])
def test_plan_windows_all_empty_gives_no_window(tokenizer, batch):
    assert plan_windows(tokenizer, batch, 10, 2) == []


def test_plan_windows_word_longer_than_window(tokenizer):
    text = "a man said supercalifragilisticexpialidocious and left " * 3
    with pytest.raises(ValueError, match="longer than the model window"):
        plan_windows(tokenizer, [text], 6, 2, 1)


def test_plan_windows_max_span_cannot_fit(tokenizer):
    text = " ".join(["don't"] * 30)  # 3 tokens per word
    with pytest.raises(ValueError, match="max_span"):
        plan_windows(tokenizer, [text], 8, 4, 0)


def test_plan_windows_rejects_empty_model_window(tokenizer):
    with pytest.raises(ValueError, match="at least one token"):
        plan_windows(tokenizer, ["a b"], 0, 1)


def test_plan_windows_accepts_spans_that_fit_exactly(tokenizer):
    text = "xyzzy xyzzy xyzzy"  # 3 tokens per word; each 1-word span fits a 5-token window
    windows = plan_windows(tokenizer, [text], 5, 1, 0)
    check_windows(tokenizer, [text], windows, 5, 1, context=0)


def test_plan_windows_shrinks_context_instead_of_failing(tokenizer):
    text = "a a a xyzzy"  # 1, 1, 1, 3 tokens
    check_windows(
        tokenizer, [text], plan_windows(tokenizer, [text], 4, 1, 0), 4, 1, context=None
    )  # fine
    windows = plan_windows(tokenizer, [text], 4, 1, 16)  # raises ValueError
    check_windows(tokenizer, [text], windows, 4, 1, context=None)


def test_b10_token_units_cut_unspaced_script_between_tokens(tiny_model_short, tiny_model):
    text = "东京中文字" * 20  # 100 characters, 100 tokens, no space: one "word" of 100 tokens
    with pytest.raises(SpanInputError, match="word of 100 tokens"):
        tiny_model_short.encode_spans(
            text, max_span=3
        )  # word units: as documented, use unit='token'
    windowed = tiny_model_short.encode_spans(text, max_span=3, unit="token")
    whole = tiny_model.encode_spans(
        text, max_span=3, unit="token"
    )  # one window of the bigger model
    np.testing.assert_array_equal(windowed.offsets, whole.offsets)
    np.testing.assert_array_equal(windowed.units, whole.units)
    index = SpanIndex.build([text * 3, "a short one"], tiny_model_short, unit="token", max_span=3)
    assert len(index.search("中文", top_k=3)[0]) == 3


# ---------------------------------------------------------------------------------------------
# planning a long text in pieces (issue 46: one long line grew memory with its length)
# ---------------------------------------------------------------------------------------------


class _CountingTokenizer:
    """The tokenizer, recording how many characters each call pads to (texts × the longest)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.padded = tokenizer, []

    def __call__(self, batch, **kwargs):
        self.padded.append(len(batch) * max(map(len, batch)))
        return self.tokenizer(batch, **kwargs)


@settings(max_examples=15, deadline=None)
@given(
    batch=st.lists(texts(min_words=1, max_words=120), min_size=1, max_size=5),
    unit=st.sampled_from(["word", "token"]),
)
def test_planning_in_pieces_gives_the_windows_of_the_whole_text(tokenizer, batch, unit):
    """Texts cut before whitespace every few characters, a few pieces tokenized at a time: the same windows (and
    errors) as each text tokenized whole, and no tokenizer call pads more than the group's characters."""
    import slice_st.tokens as tokens

    whole_errors, piece_errors = [], []
    whole = plan_windows(tokenizer, batch, 22, 3, 2, unit, whole_errors)
    counting = _CountingTokenizer(tokenizer)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tokens, "PLAN_PIECE_CHARS", 17)
        patch.setattr(tokens, "PLAN_GROUP_CHARS", 80)
        pieces = plan_windows(counting, batch, 22, 3, 2, unit, piece_errors)
    assert pieces == whole and piece_errors == whole_errors
    longest_word = max((len(word) for text in batch for word in text.split()), default=0)
    assert all(size <= max(80, longest_word + 17) for size in counting.padded), counting.padded


def test_a_long_line_with_many_short_texts_is_never_padded_to_its_length(tokenizer):
    """Texts planned together were padded to the longest: 2,000 texts of 300 characters beside one line of 200,000
    words was a (2001, 200000, 2) offsets tensor (6 GB). Now every call pads at most ``PLAN_GROUP_CHARS``."""
    from slice_st.tokens import PLAN_GROUP_CHARS, PLAN_PIECE_CHARS

    line = " ".join(["guitar"] * 20_000)
    batch = ["a man plays the guitar on a stage " * 9] * 200 + [line]
    counting = _CountingTokenizer(tokenizer)
    windows = plan_windows(counting, batch, 254, 5, 16)
    assert max(counting.padded) <= max(PLAN_GROUP_CHARS, PLAN_PIECE_CHARS)
    assert sum(window.num_words for window in windows if window.text_index == 200) >= 20_000
