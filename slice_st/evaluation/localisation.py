"""Where the best span lands: exact match and word-F1 against the paraphrase's place (its first run of equal words,
up to case and punctuation) in its passage; a predicted span covers the passage words its characters touch."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

#: Gold similarity from which a pair counts as "strong" (its paraphrase is a real match): 3 on the 0-5 scale.
STRONG_GOLD = 3.0
#: The keys of :func:`span_localisation`'s result that evaluations report.
LOCALISATION_METRICS = ("exact", "word_f1", "strong_exact", "strong_word_f1")

_NOT_WORD = re.compile(r"[^\w]+")


def span_words(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, word)`` of each whitespace-delimited word of ``text`` that has a letter or digit, lowercased.

    >>> span_words("A man, he said -- left.")
    [(0, 1, 'a'), (2, 6, 'man'), (7, 9, 'he'), (10, 14, 'said'), (18, 23, 'left')]
    """
    matches = (
        (match, _NOT_WORD.sub("", match.group().lower())) for match in re.finditer(r"\S+", text)
    )
    return [(match.start(), match.end(), word) for match, word in matches if word]


def locate_paraphrase(passage: str, paraphrase: str) -> tuple[int, int] | None:
    """The word range ``[first, end)`` of ``paraphrase`` in ``passage``, up to case and punctuation, or ``None``.

    Args:
        passage: The passage.
        paraphrase: The phrase to find, up to case and punctuation.

    Returns:
        The first matching run of words, or ``None`` when the passage does not hold it.

    Example:
        >>> locate_paraphrase("Look: a man is slicing a bun, slowly.", "A man is slicing a bun.")
        (1, 7)
    """
    words, target = ([word for _, _, word in span_words(text)] for text in (passage, paraphrase))
    for first in range(len(words) - len(target) + 1):
        if target and words[first : first + len(target)] == target:
            return first, first + len(target)
    return None


def span_localisation(
    passages: Sequence[str],
    spans: Sequence[tuple[int, int] | None],
    paraphrases: Sequence[str],
    gold_scores: Sequence[float],
    strong: float = STRONG_GOLD,
) -> dict[str, float]:
    """Exact match and word-F1 (×100) of predicted spans against the paraphrases' places.

    Rows whose passage does not hold its paraphrase are left out (``located`` counts the others). Word-F1 compares
    word positions; ``shorter``: the share of spans shorter than the paraphrase.

    Args:
        passages: The passages.
        spans: The predicted span of each passage as character offsets ``(start, end)``, or ``None`` (a miss).
        paraphrases: The paraphrase each passage holds.
        gold_scores: Gold similarities (0-5): rows with ``gold >= strong`` are reported apart (``strong_*``).
        strong: The gold score from which a row is strong.

    Returns:
        ``located``, ``exact``, ``word_f1``, ``shorter`` and the same with ``strong_`` (``nan`` for an empty group).

    Example:
        >>> passage = "Look: a man is slicing a bun, slowly."
        >>> result = span_localisation([passage], [(8, 28)], ["A man is slicing a bun."], [4.0])
        >>> result["exact"], round(result["word_f1"], 1), result["strong_located"]
        (0.0, 90.9, 1)
    """
    if not (len(passages) == len(spans) == len(paraphrases) == len(gold_scores)):
        raise ValueError("passages, spans, paraphrases and gold_scores must have the same length.")
    rows = []
    for passage, span, paraphrase, gold in zip(passages, spans, paraphrases, gold_scores):
        place = locate_paraphrase(passage, paraphrase)
        if place is None:
            continue
        words = span_words(passage)
        inside = [i for i, (a, b, _) in enumerate(words) if span and a < span[1] and span[0] < b]
        first, end = (inside[0], inside[-1] + 1) if inside else (0, 0)
        common = max(0, min(end, place[1]) - max(first, place[0]))
        f1 = 2 * common / ((end - first) + (place[1] - place[0])) if common else 0.0
        rows.append(
            (float(gold) >= strong, (first, end) == place, f1, end - first < place[1] - place[0])
        )
    result: dict[str, float] = {}
    for prefix, group in (("", rows), ("strong_", [row for row in rows if row[0]])):
        values = np.asarray([row[1:] for row in group], dtype=np.float64).reshape(-1, 3)
        result[f"{prefix}located"] = len(group)
        for column, name in enumerate(("exact", "word_f1", "shorter")):
            mean = float(100 * values[:, column].mean()) if len(group) else float("nan")
            result[f"{prefix}{name}"] = mean
    return result
