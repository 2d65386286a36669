"""Training text close to the target: a sentence placed mid-sentence inside on-topic context.

Real phrase-mining text (and the real STS-B-Context) puts the phrase *inside* a longer sentence,
among on-topic narrative: "…I noticed a group of boys are playing soccer on the beach, their laughter
echoing…". Glued unrelated sentences (:func:`slice_st.data.passages.cut_passages`,
``slice-st make-context``) are much easier. :func:`on_topic_contexts` builds the harder kind from
sentences at hand, with no generator model: for each target sentence it retrieves on-topic
neighbours from a pool (cosine in a band: related, but not paraphrases of the target or of a
``query`` to avoid), and joins them around the target in one of four seeded styles — sentences
around it, the target as a clause after an introductory phrase, the target as a clause between
neighbour clauses, or the target quoted. The target's character offsets in each passage are
returned, so labelled pairs (origin phrase, passage, score) can be built from STS data
(:func:`offline_sts_contexts`), and unlabeled passages for self-distillation from any sentences.
"""

from __future__ import annotations

import csv
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slice_st.data.passages import evaluation_sentences, read_texts
from slice_st.data.stsb import read_stsb
from slice_st.text import one_line, require

__all__ = ["ContextPassage", "on_topic_contexts", "offline_sts_contexts", "offline_context_passages", "STS_SOURCES"]

INTRODUCTIONS = (
    "Looking around, I noticed that", "In the picture", "Later that afternoon", "As we walked by,", "According to the report,",
    "My friend told me that", "From the window I could see that", "Nearby,", "At that moment", "It was clear that",
    "In the video", "Just as the sun was setting,", "Everyone saw that", "When I arrived,", "On the news they said that",
    "Surprisingly,", "I remember the day when", "We watched as", "The article explained that", "Yesterday",
    "While I was waiting,", "Out of nowhere,",
)
CONNECTIVES = (", and", ", while", " as", ", where", " because", ", although", ", just as", " after", ", so", ", which meant that")
QUOTERS = ("She said", "He told us", "The caption read", "Someone wrote")


@dataclass(frozen=True)
class ContextPassage:
    """A passage and where its target sentence sits in it (``text[start:end]`` is the target as written there)."""

    text: str
    start: int
    end: int


def _lower_first(sentence: str) -> str:
    words = sentence.split()
    first = words[0] if words else sentence
    if first == "I" or any(ch.isupper() for ch in first[1:]):  # "I", acronyms and names with inner capitals stay
        return sentence
    return sentence[:1].lower() + sentence[1:]


def _clause(sentence: str) -> str:
    return sentence.rstrip(" .!?")


def _compose(target: str, neighbours: list[str], rng: random.Random, min_words: int) -> ContextPassage:
    """One passage around ``target`` from ``neighbours`` (at least 3; more are added until ``min_words``)."""
    first, second, third = neighbours[:3]
    style = rng.random()
    if style < 0.2:  # on-topic sentences around the target
        before = [first] if rng.random() < 0.5 else [first, second]
        after = [second] if len(before) == 1 else []
        prefix, body, suffix = " ".join(before) + " ", target, (" " + " ".join(after)) if after else ""
    elif style < 0.6:  # an introductory clause, the target as a clause, a neighbour clause
        prefix = (second + " " if rng.random() < 0.6 else "") + rng.choice(INTRODUCTIONS) + " "
        body = _clause(_lower_first(target))
        suffix = f"{rng.choice(CONNECTIVES)} {_lower_first(_clause(first))}."
    elif style < 0.85:  # between neighbour clauses
        prefix = f"{_clause(first)}{rng.choice(CONNECTIVES)} "
        body = _clause(_lower_first(target))
        suffix = f", {_lower_first(_clause(second))}." + (" " + third if rng.random() < 0.4 else "")
    else:  # quoted
        prefix, body, suffix = f"{first} {rng.choice(QUOTERS)}, \"", target, f"\" {second}"
    extra = list(neighbours[3:])
    while len((prefix + body + suffix).split()) < min_words and extra:
        if rng.random() < 0.5:
            prefix = extra.pop() + " " + prefix
        else:
            suffix = suffix + " " + extra.pop()
    return ContextPassage(prefix + body + suffix, len(prefix), len(prefix) + len(body))


def on_topic_contexts(
    targets: Sequence[str],
    pool: Sequence[str],
    model,
    *,
    avoid: Sequence[str] | None = None,
    band: tuple[float, float] = (0.15, 0.55),
    min_words: int = 35,
    seed: int = 0,
    batch_size: int = 128,
    show_progress_bar: bool = False,
) -> list[ContextPassage]:
    """Each target sentence inside on-topic context retrieved from ``pool`` (see the module docstring).

    Neighbours are pool sentences whose cosine (``model.encode``) to the target lies in ``band``;
    with ``avoid`` (one text per target, e.g. the origin phrase of an STS pair), their cosine to it
    must stay below the band's top too, so the context holds no second paraphrase. Sentences equal
    to the target or to ``avoid`` (case and spacing ignored) are never used. Same inputs and seed,
    same passages.

    >>> from slice_st import load_model
    >>> pool = ["A dog runs in the park.", "Kids play football on the grass.", "A cat sleeps on the sofa.",
    ...         "Two boys kick a ball.", "The stadium was full.", "People cheer at the match."]
    >>> passage = on_topic_contexts(["A group of boys play soccer on the beach."], pool, load_model("base"), min_words=10)[0]
    >>> passage.text[passage.start:passage.end].lower().startswith("a group of boys play soccer on the beach")
    True
    """
    import torch

    for what, texts in (("targets", targets), ("pool", pool), ("avoid", avoid or [])):
        for index, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{what}[{index}] is empty or not a string: {text!r:.60}.")
    targets, pool = [one_line(t) for t in targets], [one_line(p) for p in pool]
    if avoid is not None and len(avoid) != len(targets):
        raise ValueError(f"avoid must give one text per target: {len(avoid)} for {len(targets)} targets.")
    if len(pool) < 3:
        raise ValueError(f"the pool needs at least 3 sentences to build contexts, got {len(pool)}.")
    low, high = band
    if not -1 <= low < high <= 1:
        raise ValueError(f"band must be (low, high) with -1 <= low < high <= 1, got {band}.")
    rng = random.Random(seed)

    def encode(texts: Sequence[str]):
        return model.encode(list(texts), batch_size=batch_size, convert_to_tensor=True, normalize_embeddings=True,
                            show_progress_bar=show_progress_bar).float().cpu()

    pool_vectors, target_vectors = encode(pool), encode(targets)
    avoid_vectors = encode(avoid) if avoid is not None else None
    normalised = [" ".join(p.lower().split()) for p in pool]
    take = min(40, len(pool))
    passages = []
    for lo in range(0, len(targets), 512):
        sims = target_vectors[lo : lo + 512] @ pool_vectors.T
        keep = sims < high
        if avoid_vectors is not None:
            keep &= (avoid_vectors[lo : lo + 512] @ pool_vectors.T) < high
        top = torch.topk(torch.where(keep, sims, torch.full_like(sims, -2.0)), take, dim=1)
        for row in range(sims.shape[0]):
            index = lo + row
            banned = {" ".join(targets[index].lower().split())}
            if avoid is not None:
                banned.add(" ".join(avoid[index].lower().split()))
            ranked = [int(j) for j in top.indices[row] if normalised[int(j)] not in banned]
            chosen = [j for j, value in zip(top.indices[row].tolist(), top.values[row].tolist()) if value > low and j in ranked]
            if len(chosen) < 3:  # too few in the band: the nearest allowed ones
                chosen = ranked[: max(3, len(chosen))]
            rng.shuffle(chosen)
            chosen = (chosen * 3)[:6]
            passages.append(_compose(targets[index], [pool[j] for j in chosen], rng, min_words))
    return passages


#: Labelled sources of :func:`offline_sts_contexts`: STS-B train (0–5) and SICK relatedness (1–5), scaled to 0–1.
STS_SOURCES = ("stsb", "sick")


def _sts_pairs(data_dir: str, sources: Sequence[str]) -> list[tuple[str, str, float, str]]:
    pairs: list[tuple[str, str, float, str]] = []
    for source in sources:
        if source == "stsb":
            rows = read_stsb(os.path.join(data_dir, "stsbenchmark", "sts-train.csv"))
            pairs += [(a, b, s / 5.0, "stsb") for a, b, s in zip(rows["sentence1"], rows["sentence2"], rows["score"])]
        elif source == "sick":
            path = os.path.join(data_dir, "sick", "SICK.txt")
            if not os.path.exists(path):
                raise FileNotFoundError(f"No such file: {path}")
            with open(path, encoding="utf-8", newline="") as handle:
                rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
            pairs += [(r["sentence_A"], r["sentence_B"], (float(r["relatedness_score"]) - 1) / 4, "sick") for r in rows]
        else:
            raise ValueError(f"unknown STS source {source!r}; choose from {', '.join(STS_SOURCES)}.")
    return pairs


def _context_pool(data_dir: str, extra: Sequence[str]) -> list[str]:
    pool = list(extra)
    for name in ("s1.dev", "s2.dev", "s1.test", "s2.test"):
        path = os.path.join(data_dir, "snli", name)
        if os.path.exists(path):
            pool += read_texts(path, detokenize=True)
    return pool


def offline_sts_contexts(
    data_dir: str | os.PathLike,
    model,
    *,
    sources: Sequence[str] = STS_SOURCES,
    exclude_paths: Sequence[str | os.PathLike] = (),
    seed: int = 0,
    limit: int | None = None,
    show_progress_bar: bool = False,
) -> Any:
    """Graded pairs in context from the shared data: ``datasets.Dataset`` with ``query``, ``passage``, ``score`` (0–1).

    Each STS pair's second sentence is placed inside on-topic context (:func:`on_topic_contexts`, the
    pool: STS sentences and SNLI sentences; neighbours close to the first sentence are avoided); the
    first sentence is the origin phrase. Pairs with a sentence of ``exclude_paths`` (dev sets) are
    dropped. Licences: STS-B scores CC BY-SA 4.0; SICK CC BY-NC-SA 3.0 (non-commercial).
    """
    datasets = require("datasets", "train", "building training contexts")

    data_dir = os.fspath(data_dir)
    excluded = evaluation_sentences(exclude_paths)
    normal = lambda text: " ".join(text.lower().split())  # noqa: E731
    pairs = [(one_line(a), one_line(b), s, src) for a, b, s, src in _sts_pairs(data_dir, sources)
             if a.strip() and b.strip() and normal(a) not in excluded and normal(b) not in excluded]
    random.Random(seed).shuffle(pairs)
    if limit is not None:
        pairs = pairs[:limit]
    pool = [t for t in dict.fromkeys(_context_pool(data_dir, [p[0] for p in pairs] + [p[1] for p in pairs]))
            if normal(t) not in excluded and 3 <= len(t.split()) <= 30]
    passages = on_topic_contexts([p[1] for p in pairs], pool, model, avoid=[p[0] for p in pairs], seed=seed,
                                 show_progress_bar=show_progress_bar)
    return datasets.Dataset.from_dict({
        "query": [p[0] for p in pairs], "passage": [c.text for c in passages], "score": [float(p[2]) for p in pairs],
    })


def offline_context_passages(
    data_dir: str | os.PathLike,
    model,
    *,
    exclude_paths: Sequence[str | os.PathLike] = (),
    count: int = 12000,
    seed: int = 0,
    show_progress_bar: bool = False,
) -> Any:
    """Unlabeled on-topic passages (one ``text`` column) for span self-distillation, from STS-B train, SICK and SNLI sentences."""
    datasets = require("datasets", "train", "building training contexts")

    data_dir = os.fspath(data_dir)
    excluded = evaluation_sentences(exclude_paths)
    pairs = _sts_pairs(data_dir, STS_SOURCES)
    sentences = [t for t in dict.fromkeys(one_line(t) for t in _context_pool(data_dir, [p[0] for p in pairs] + [p[1] for p in pairs]))
                 if " ".join(t.lower().split()) not in excluded and 3 <= len(t.split()) <= 30]
    targets = random.Random(seed).sample(sentences, min(count, len(sentences)))
    passages = on_topic_contexts(targets, sentences, model, seed=seed, show_progress_bar=show_progress_bar)
    return datasets.Dataset.from_dict({"text": [p.text for p in passages]})
