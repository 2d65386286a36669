"""Span scorers, which decide a text's best span: ``"max-cosine"`` (the paper's), ``"phrase"`` (the cosine minus costs
for what a phrase does not look like; English word lists) and ``"reranked"`` (default: :mod:`slice_st.rerank`)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy and torch are imported by the functions that need them: `slice-st --help` reads SPAN_SCORERS
    import numpy as np
    from torch import Tensor

__all__ = ["SpanScorer"]

#: A span should not start on these (unless the query does): conjunctions, prepositions, relatives.
START_WORDS = frozenset(
    "and or but nor to of in on at by for with from as that which who than so then while when where because "
    "into onto upon over under about after before if".split()
)
#: A span should not end on these (unless the query does): articles, conjunctions, prepositions, auxiliaries,
#: possessives.
END_WORDS = frozenset(
    "a an the and or but nor to of in on at by for with from as that which who whom whose is are was were be been "
    "being its his her their our my your this these those than then so if because while into onto upon over under "
    "about after before very each".split()
)
#: A span should not start right after these: it would cut a noun phrase ("a | man is ...").
DETERMINERS = frozenset(
    "a an the this these those my his her their our your its some several".split()
)

#: Bits of :func:`unit_flags`.
START_WORD, AFTER_DETERMINER, END_WORD, CLAUSE_MARK = 1, 2, 4, 8
SENTENCE_END, CLAUSE_AFTER, CLAUSE_BEFORE = 16, 32, 64

_NOT_WORD = re.compile(r"[^\w]+")
_CLAUSE = re.compile(r"[,;:.!?][\W_]*$")
_SENTENCE = re.compile(r"[.!?][\W_]*$")
_INNER_CLAUSE = re.compile(r"[,;:]")
_CLAUSE_END = re.compile(r"[,;:.!?\"”’)\]][\W_]*$")
_CLAUSE_OPEN = re.compile(r"^[\"“‘(\[]")
#: A title or Latin abbreviation whose full stop ends neither a sentence nor a clause ("Dr. Smith", "e.g. this").
_ABBREVIATION = re.compile(r"^[\"“‘(\[]?(?:Mr|Mrs|Ms|Dr|Prof|e\.g|i\.e)\.$")


#: The largest cost a :class:`SpanScorer` takes (costs are compared with cosines, which lie in [-1, 1]).
MAX_COST = 1e6


@dataclass(frozen=True)
class SpanScorer:
    """How the best span of a text is decided: the span's cosine minus costs for what a phrase does not look like.

    Args:
        name: A label for reports (``"phrase"``, ``"max-cosine"`` or your own).
        length_short: Cost per unit of ``log(Lq / L)`` when the span is shorter than the query.
        length_long: Cost per unit of ``log(L / Lq)`` when the span is longer than the query.
        start_word: Cost of starting on a function word ("and", "to", "of", ...) when the query does not.
        after_determiner: Cost of starting right after a determiner ("a", "the", "his", ...).
        end_word: Cost of ending on a function word ("the", "and", "is", ...) when the query does not.
        clause: Cost of running over a clause mark (``, ; :``) when the query has none inside it.
        sentence: Cost of running over a sentence end (``. ! ?``).
        open_end: Cost, for a query that is a whole sentence, of a span that does not end where a clause ends.
        open_start: Cost, for a query that is a whole sentence, of a span that does not start where a clause starts.
        rerank: The shipped re-ranker (a file of ``slice_st/pretrained/rerank/``) picking among the top candidates.

    Example:
        >>> from slice_st.scoring import SpanScorer, resolve_scorer
        >>> resolve_scorer("max-cosine").is_plain
        True
        >>> SpanScorer(name="no-length", length_short=0.0, length_long=0.0).sentence
        0.1
    """

    name: str = "phrase"
    length_short: float = 0.1
    length_long: float = 0.06
    start_word: float = 0.02
    after_determiner: float = 0.05
    end_word: float = 0.05
    clause: float = 0.02
    sentence: float = 0.1
    open_end: float = 0.05
    open_start: float = 0.01
    rerank: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"SpanScorer name must be a non-empty string, got {self.name!r}.")
        if self.rerank is not None and (
            not isinstance(self.rerank, str) or not re.fullmatch(r"[\w.-]+", self.rerank)
        ):
            raise ValueError(
                f"SpanScorer.rerank must be None or a re-ranker's file name, got {self.rerank!r}."
            )
        for name in _COST_FIELDS:
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            # larger overflows float32 scores
            if not (number and math.isfinite(value) and 0 <= value <= MAX_COST):
                raise ValueError(
                    f"SpanScorer.{name} must be a number from 0 to {MAX_COST:g}, got {value!r}."
                )

    @property
    def is_plain(self) -> bool:
        """True when every cost is 0 and nothing re-ranks: the score is the cosine (the paper's max-cosine protocol)."""
        return self.rerank is None and all(getattr(self, name) == 0 for name in _COST_FIELDS)

    def to_dict(self) -> dict:
        """The scorer's settings (for reports, model cards and index manifests)."""
        return asdict(self)


_COST_FIELDS = [field.name for field in fields(SpanScorer) if field.name not in ("name", "rerank")]


#: The re-ranker of ``"reranked"`` for every model but a shipped one fitted its own (``<name>-rerank``).
DEFAULT_RERANKER = "slice-minilm-rerank"
#: The named scorers. ``"reranked"`` is the default: the ``"phrase"`` costs, then the shipped re-ranker;
#: ``"max-cosine"`` is the paper's protocol.
SPAN_SCORERS: dict[str, SpanScorer] = {
    "reranked": SpanScorer("reranked", rerank=DEFAULT_RERANKER),
    "phrase": SpanScorer(),
    "max-cosine": SpanScorer("max-cosine", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
}
#: The scorer used when none is given.
DEFAULT_SCORER = "reranked"


def scorer_for_model(scorer: SpanScorer, shipped_name: str | None) -> SpanScorer:
    """``scorer`` with the re-ranker fitted for the shipped model ``shipped_name`` when the package has one
    (``slice_st/pretrained/rerank/<name>-rerank.json``); any other model keeps :data:`DEFAULT_RERANKER`.

    >>> scorer_for_model(resolve_scorer(None), "slice-minilm").rerank
    'slice-minilm-rerank'
    """
    from importlib import resources

    own = f"{shipped_name}-rerank"
    if scorer.rerank != DEFAULT_RERANKER or not shipped_name or own == DEFAULT_RERANKER:
        return scorer
    if not resources.files("slice_st.pretrained").joinpath("rerank", f"{own}.json").is_file():
        return scorer
    return replace(scorer, rerank=own)


def resolve_scorer(scorer: str | SpanScorer | None) -> SpanScorer:
    """The :class:`SpanScorer` for a name of :data:`SPAN_SCORERS`, a scorer, or ``None`` (the default); else a
    ``ValueError``.

    >>> resolve_scorer(None).name, resolve_scorer("max-cosine").name
    ('reranked', 'max-cosine')
    """
    if scorer is None:
        return SPAN_SCORERS[DEFAULT_SCORER]
    if isinstance(scorer, SpanScorer):
        return scorer
    if isinstance(scorer, str) and scorer in SPAN_SCORERS:
        return SPAN_SCORERS[scorer]
    raise ValueError(
        f"scorer must be one of {sorted(SPAN_SCORERS)} or a SpanScorer, got {scorer!r}."
    )


def word(unit: str) -> str:
    """A unit's word: lowercased, punctuation stripped (``""`` for a unit with no letter or digit)."""
    return _NOT_WORD.sub("", unit.lower())


def query_words(query: str) -> list[str]:
    """The query's words (lowercased, punctuation stripped)."""
    return [w for w in (word(unit) for unit in query.split()) if w]


def unit_flags(units: Sequence[str], text_start: bool = True, text_end: bool = True) -> np.ndarray:
    """``(U,)`` ``uint8`` flags of one text's units (``text_start`` / ``text_end``: whether they start / end the text).

    Bits: ``START_WORD`` / ``END_WORD`` (a function word or no word), ``AFTER_DETERMINER``, ``CLAUSE_MARK``
    (ends with ``, ; : . ! ?``), ``SENTENCE_END`` (``. ! ?``), ``CLAUSE_AFTER`` (a clause ends with the unit) and
    ``CLAUSE_BEFORE`` (a clause starts at it). The full stop of a title or a Latin abbreviation ("Dr.", "Mrs.",
    "e.g.") ends nothing.

    >>> unit_flags(["the", "man", "left.", "And"]).tolist()
    [68, 2, 56, 101]
    >>> unit_flags(["ask", "Dr.", "Smith."]).tolist()
    [64, 0, 56]
    """
    import numpy as np

    words = [word(unit) for unit in units]
    flags = np.zeros(len(words), dtype=np.uint8)
    abbreviated = [bool(_ABBREVIATION.match(unit)) for unit in units]
    closes = [
        bool(_CLAUSE_END.search(unit)) and not short for unit, short in zip(units, abbreviated)
    ]
    if closes and text_end:
        closes[-1] = True
    for index, (unit, name) in enumerate(zip(units, words)):
        after_close = closes[index - 1] if index else text_start
        bits = (
            (START_WORD, not name or name in START_WORDS),
            (END_WORD, not name or name in END_WORDS),
            (AFTER_DETERMINER, index > 0 and words[index - 1] in DETERMINERS),
            (CLAUSE_MARK, not abbreviated[index] and _CLAUSE.search(unit)),
            (SENTENCE_END, not abbreviated[index] and _SENTENCE.search(unit)),
            (CLAUSE_AFTER, closes[index]),
            (CLAUSE_BEFORE, after_close or _CLAUSE_OPEN.search(unit)),
        )
        flags[index] = sum(bit for bit, on in bits if on)
    return flags


def query_profiles(queries: Sequence[str], lengths: Sequence[int]) -> np.ndarray:
    """``(Q, 5)`` per query (``lengths`` in units): length, starts / ends on a function word, has a clause mark
    inside, is a whole sentence.

    >>> query_profiles(["to the", "A man, tall."], [2, 3]).tolist()
    [[2.0, 1.0, 1.0, 0.0, 0.0], [3.0, 0.0, 0.0, 1.0, 1.0]]
    """
    import numpy as np

    rows = []
    for query, length in zip(queries, lengths):
        words, text = query_words(query), query.strip()
        edges = bool(words) and words[0] in START_WORDS, bool(words) and words[-1] in END_WORDS
        marks = _INNER_CLAUSE.search(text.rstrip(".!?;:,")), _SENTENCE.search(text)
        rows.append([max(int(length), 1), *(float(bool(value)) for value in (*edges, *marks))])
    return np.asarray(rows, dtype=np.float32).reshape(-1, 5)


@dataclass
class SpanCosts:
    """Costs of every span of a batch of rows as tables: by first unit ``start`` and last unit ``end`` ``(B, U, Q)``,
    by length ``(B, Q, K)``, and ``mark_cost`` ``(B, Q, 2)`` per clause mark / sentence end on a unit but the last
    (``marks`` ``(B, U + 1, 2)``: their prefix counts)."""

    start: Tensor
    end: Tensor
    length: Tensor
    marks: Tensor
    mark_cost: Tensor

    def of_length(self, length: int, count: int, min_span: int) -> Tensor:
        """``(B, count, Q)`` costs of the spans of ``length`` units starting at units ``0..count-1`` (fast: slices)."""
        cost = self.start[:, :count] + self.end[:, length - 1 : length - 1 + count]
        cost = cost + self.length[:, None, :, length - min_span]
        # (B, count, 2)
        inner = self.marks[:, length - 1 : length - 1 + count] - self.marks[:, :count]
        return cost + (inner > 0).to(cost.dtype) @ self.mark_cost.transpose(1, 2)

    def of_spans(self, starts: Tensor, ends: Tensor, min_span: int) -> Tensor:
        """``(B, n, Q)`` costs of the spans ``[starts, ends)`` of units (index tensors broadcast to ``(B, n, Q)``),
        summed as :meth:`of_length` sums them; clamped into the tables, so a span past its row costs some number."""
        import torch

        batch, width, num_queries = self.start.shape
        rows = torch.arange(batch, device=starts.device)[:, None, None]
        queries = torch.arange(num_queries, device=starts.device)[None, None, :]
        first, last = starts.clamp(0, width - 1), (ends - 1).clamp(0, width - 1)
        lengths = (ends - starts - min_span).clamp(0, self.length.shape[2] - 1)

        # table[rows, middle, end]: a flat take is faster on CPU
        def at(table: Tensor, middle, end) -> Tensor:
            return table.take((rows * table.shape[1] + middle) * table.shape[2] + end)

        cost = (
            at(self.start, first, queries)
            + at(self.end, last, queries)
            + at(self.length, queries, lengths)
        )
        inner = [
            (at(self.marks, last, m) - at(self.marks, first, m) > 0).to(cost.dtype) for m in (0, 1)
        ]
        return cost + (
            inner[0] * self.mark_cost[:, None, :, 0] + inner[1] * self.mark_cost[:, None, :, 1]
        )


def span_costs(
    scorer: SpanScorer, flags: Tensor, profiles: Tensor, min_span: int, max_span: int
) -> SpanCosts:
    """The :class:`SpanCosts` of ``scorer`` for rows with unit ``flags`` ``(B, U)`` and query ``profiles`` ``(Q, 5)``
    (or ``(B, Q, 5)``: each row its own queries), on ``flags``' device.

    >>> import torch
    >>> flags = torch.from_numpy(unit_flags(["a", "man", "sings."])).long()[None]
    >>> profiles = torch.from_numpy(query_profiles(["a man sings"], [3]))
    >>> costs = span_costs(resolve_scorer("phrase"), flags, profiles, 1, 3)
    >>> [round(float(c), 3) for c in costs.of_length(3, 1, 1)[0, :, 0]]  # "a man sings.": nothing to pay
    [0.0]
    """
    import torch

    device = flags.device
    flags = flags.long()
    batch = flags.shape[0]
    if profiles.dim() == 2:
        profiles = profiles[None].expand(batch, -1, -1)
    profiles = profiles.to(device=device, dtype=torch.float32)
    bit = lambda mask: ((flags & mask) > 0).float()[..., None]  # noqa: E731  (B, U, 1)
    # (B, 1, Q): the query starts on a function word → no start cost
    free_start = 1.0 - profiles[:, None, :, 1]
    free_end = 1.0 - profiles[:, None, :, 2]
    # (B, 1, Q): open starts and ends cost only for a sentence query
    sentence_query = profiles[:, None, :, 4]
    after_determiner = scorer.after_determiner * bit(AFTER_DETERMINER)
    start = scorer.start_word * bit(START_WORD) * free_start + after_determiner
    start = start + scorer.open_start * (1.0 - bit(CLAUSE_BEFORE)) * sentence_query
    end = (
        scorer.end_word * bit(END_WORD) * free_end
        + scorer.open_end * (1.0 - bit(CLAUSE_AFTER)) * sentence_query
    )
    lengths = torch.arange(min_span, max_span + 1, device=device, dtype=torch.float32)
    ratio = torch.log(lengths[None, None, :] / profiles[..., 0:1])  # (B, Q, K)
    length = scorer.length_short * (-ratio).clamp(min=0) + scorer.length_long * ratio.clamp(min=0)
    marks = torch.stack([bit(CLAUSE_MARK)[..., 0], bit(SENTENCE_END)[..., 0]], dim=-1)  # (B, U, 2)
    marks = torch.cat([marks.new_zeros(batch, 1, 2), marks.cumsum(dim=1)], dim=1)
    clause = scorer.clause * (1.0 - profiles[..., 3])
    mark_cost = torch.stack([clause, torch.full_like(clause, scorer.sentence)], dim=-1)
    return SpanCosts(start, end, length, marks, mark_cost)


def costs_of_spans(scorer: SpanScorer, flags, marks, profile, starts, lengths) -> np.ndarray:
    """``(n,)`` costs (as :func:`span_costs`; 0 where ``starts < 0``) of spans ``starts``, ``lengths`` of one flat
    run of units (e.g. an index) with ``flags`` ``(N,)``, their ``marks`` (:func:`mark_prefix`) and a query ``profile``.

    >>> import numpy as np
    >>> flags = unit_flags(["a", "man", "sings.", "And"])
    >>> profile = query_profiles(["a man sings"], [3])[0]
    >>> costs_of_spans(SpanScorer(), flags, mark_prefix(flags), profile, np.array([0, 1]), np.array([3, 3])).round(3)
    array([0.  , 0.22])
    """
    import numpy as np

    starts, lengths = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    valid = (starts >= 0) & (lengths > 0)
    first, last = np.where(valid, starts, 0), np.where(valid, starts + lengths - 1, 0)
    flags = np.asarray(flags).astype(np.int64)
    bit = lambda index, mask: ((flags[index] & mask) > 0).astype(np.float64)  # noqa: E731
    cost = scorer.start_word * bit(first, START_WORD) * (1.0 - profile[1])
    cost = cost + scorer.after_determiner * bit(first, AFTER_DETERMINER)
    cost += scorer.end_word * bit(last, END_WORD) * (1.0 - profile[2])
    cost += profile[4] * (
        scorer.open_start * (1.0 - bit(first, CLAUSE_BEFORE))
        + scorer.open_end * (1.0 - bit(last, CLAUSE_AFTER))
    )
    ratio = np.log(np.maximum(lengths, 1) / max(float(profile[0]), 1.0))
    cost += scorer.length_short * np.maximum(-ratio, 0) + scorer.length_long * np.maximum(ratio, 0)
    inner = (marks[last] - marks[first]) > 0  # (n, 2): marks on the span's units but the last
    cost += scorer.clause * (1.0 - profile[3]) * inner[:, 0] + scorer.sentence * inner[:, 1]
    return np.where(valid, cost, 0.0)


def mark_prefix(flags: np.ndarray) -> np.ndarray:
    """``(..., N + 1, 2)`` prefix counts of clause marks and sentence ends over runs of unit flags ``(..., N)``."""
    import numpy as np

    flags = np.asarray(flags).astype(np.int64)
    marked = [(flags & CLAUSE_MARK) > 0, (flags & SENTENCE_END) > 0]
    marks = np.stack(marked, axis=-1).astype(np.int64)
    return np.concatenate([np.zeros_like(marks[..., :1, :]), np.cumsum(marks, axis=-2)], axis=-2)


# Negations and conditions kept: a span never starts after a word that governs it inside its clause.
#: Words that negate or condition what follows them in their clause (English; contractions as :func:`word` writes
#: them: "can't" is "cant").
GOVERNORS = frozenset(
    "not no never neither nor none nobody nothing nowhere cannot without unless except excluding if "
    "dont doesnt didnt cant couldnt wont wouldnt shant shouldnt isnt arent wasnt werent hasnt havent hadnt mustnt "
    "neednt mightnt aint".split()
)
#: A preposition right before "no" leads the negation ("in no event", "under no circumstances", "at no time").
GOVERNOR_LEADS = frozenset("in under at by on".split())
#: Words that open a new scope: a negation before them does not govern what follows ("couldn't help but smile as
#: she watched a dog"); a unit of dashes does the same.
SCOPE_BREAKS = frozenset(
    "as when while because since until after before that which who whom whose where but".split()
)
#: Common English words: a text with none of them is not English-like and keeps its spans as scored.
ENGLISH_MARKERS = frozenset(
    "the and of to is are was were be it this that you your we our they their will shall may must can "
    "for with from any all has have do does i my".split()
)
#: Codes of :func:`governor_units`.
GOVERNS, BREAKS = 1, 2


def governor_units(units: Sequence[str]) -> np.ndarray:
    """``(U,)`` ``uint8`` codes: ``GOVERNS`` for a :data:`GOVERNORS` word or a :data:`GOVERNOR_LEADS` preposition
    before "no", ``BREAKS`` for a :data:`SCOPE_BREAKS` word or a unit of dashes; all 0 for a text with no
    :data:`ENGLISH_MARKERS` word (not English-like).

    >>> governor_units(["In", "no", "event", "will", "the", "authors", "be", "liable", "as", "-"]).tolist()
    [1, 1, 0, 0, 0, 0, 0, 0, 2, 2]
    >>> governor_units(["I", "can't", "hear"]).tolist(), bool(governor_units(["no", "hay", "nada"]).any())
    ([0, 1, 0], False)
    """
    import numpy as np

    words = [word(unit) for unit in units]
    codes = np.zeros(len(words), dtype=np.uint8)
    if not ENGLISH_MARKERS.intersection(words):
        return codes
    for index, (unit, name) in enumerate(zip(units, words)):
        lead = name in GOVERNOR_LEADS and index + 1 < len(words) and words[index + 1] == "no"
        dashes = not name and bool(unit.strip()) and set(unit.strip()) <= set("-–—")
        if name in GOVERNORS or lead:
            codes[index] = GOVERNS
        elif name in SCOPE_BREAKS or dashes:
            codes[index] = BREAKS
    return codes


def governed_starts(codes, flags, starts, ends, max_span: int) -> np.ndarray:
    """``(B, n)`` span starts moved left to keep the negations and conditions that govern the spans: when a
    governor (``codes`` ``(B, U)`` of :func:`governor_units`) lies in a span's scope left of it (from the start of its
    clause, ``flags`` ``(B, U)``' ``CLAUSE_BEFORE``, or after the last scope break), the span starts at the scope's
    start, or, when that would make it longer than ``max_span`` units, at the first governor that keeps it within
    ``max_span`` (none: it stays). ``starts`` / ``ends`` ``(B, n)`` (``-1``: none, kept).

    >>> units = ["It", "is", "free.", "In", "no", "event", "will", "the", "authors", "be", "liable."]
    >>> governed_starts(governor_units(units)[None], unit_flags(units)[None], [[7, 0]], [[11, 3]], 20).tolist()
    [[3, 0]]
    >>> governed_starts(governor_units(units)[None], unit_flags(units)[None], [[7]], [[11]], 6).tolist()
    [[7]]
    """
    import numpy as np

    codes, flags = np.asarray(codes, np.int64), np.asarray(flags).astype(np.int64)
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    width = codes.shape[1]
    position = np.broadcast_to(np.arange(width), codes.shape)
    after_break = np.concatenate([np.zeros((len(codes), 1), bool), codes[:, :-1] == BREAKS], axis=1)
    opens = ((flags & CLAUSE_BEFORE) > 0) | after_break
    # where each unit's scope starts
    scope = np.maximum.accumulate(np.where(opens, position, 0), axis=1)
    governs = codes == GOVERNS
    # next governor
    first = np.minimum.accumulate(np.where(governs, position, width)[:, ::-1], axis=1)[:, ::-1]
    first = np.concatenate([first, np.full((len(first), 1), width)], axis=1)
    valid = (starts > 0) & (ends > starts)
    begin = np.take_along_axis(scope, np.clip(starts, 0, width - 1), axis=1)
    lowest = np.maximum(begin, ends - max_span)
    governor = np.take_along_axis(first, np.clip(lowest, 0, width), axis=1)
    moved = np.where(begin >= ends - max_span, begin, governor)
    return np.where(valid & (governor < starts), moved, starts)
