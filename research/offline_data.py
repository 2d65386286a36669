"""The paper's training data, reachable offline: SLICE triplets and distillation passages from the shared data folder.

SNLI triplets, SICK, STS-B *train* and PPDB phrase pairs become SLICE triplets by placing the positive and the
negative sentence verbatim inside context (:func:`research.context.make_context`, as the STS-B-Context dev set is
built); STS-B, SICK, SNLI sentences and ParaBank documents become distillation passages. Sentences of the dev
files are excluded so that training never sees them. ``python -m research.train`` trains on them (``make model``).
"""

from __future__ import annotations

import csv
import json
import os
import random
from collections.abc import Iterable, Sequence

from research.context import make_context
from slice_st.data.passages import cut_passages, evaluation_sentences, read_texts
from slice_st.data.stsb import read_stsb
from slice_st.errors import DataFormatError
from slice_st.text import one_line


def detokenize(text: str) -> str:
    """Undo SNLI's spaces before punctuation (``"packages ."`` → ``"packages."``)."""
    text = one_line(text)
    for mark in (" .", " ,", " !", " ?", " ;", " :", " 's", " n't", " '"):
        text = text.replace(mark, mark[1:])
    return text


def _open_text(path: str | os.PathLike):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such file: {path}")
    return open(path, encoding="utf-8", newline="")


def read_snli_triplets(path: str | os.PathLike) -> list[tuple[str, str, str]]:
    """SNLI triplets TSV (header ``anchor, positive, negative``; pre-tokenised text) → list of triples."""
    triples = []
    with _open_text(path) as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["anchor", "positive", "negative"]:
            raise DataFormatError(
                f"{path}: expected a header 'anchor<TAB>positive<TAB>negative', got {header!r}."
            )
        for number, row in enumerate(reader, start=2):
            if len(row) < 3 or not all(field.strip() for field in row[:3]):
                raise DataFormatError(f"{path}, line {number}: expected 3 non-empty fields.")
            triples.append(tuple(detokenize(field) for field in row[:3]))
    return triples


def read_sick_pairs(path: str | os.PathLike, min_relatedness: float = 4.0) -> list[tuple[str, str]]:
    """SICK (TSV with header) sentence pairs whose relatedness (1–5) is at least ``min_relatedness``."""
    pairs = []
    with _open_text(path) as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        required = {"sentence_A", "sentence_B", "relatedness_score"}
        if not required <= set(reader.fieldnames or []):
            raise DataFormatError(
                f"{path}: expected columns {sorted(required)}, got {reader.fieldnames}."
            )
        for number, row in enumerate(reader, start=2):
            try:
                score = float(row["relatedness_score"])
            except (TypeError, ValueError):
                raise DataFormatError(
                    f"{path}, line {number}: relatedness_score {row['relatedness_score']!r} is not a number."
                ) from None
            if score >= min_relatedness:
                pairs.append((row["sentence_A"].strip(), row["sentence_B"].strip()))
    return pairs


def read_ppdb_pairs(path: str | os.PathLike) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """PEARL's PPDB JSON (``[phrase, phrase, "pos"|"neg"]``) → positive pairs, and negatives per phrase."""
    with _open_text(path) as handle:
        try:
            rows = json.load(handle)
        except ValueError as error:
            raise DataFormatError(f"{path}: not valid JSON ({error}).") from None
    positives, negatives = [], {}
    for number, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 3 and row[2] in ("pos", "neg")):
            raise DataFormatError(
                f"{path}, item {number}: expected [phrase, phrase, 'pos'|'neg'], got {row!r}."
            )
        if row[2] == "pos":
            positives.append((row[0], row[1]))
        else:
            negatives.setdefault(row[0], []).append(row[1])
    return positives, negatives


def pairs_to_triples(
    pairs: Sequence[tuple[str, str]],
    negatives: dict[str, list[str]] | None = None,
    *,
    seed: int = 0,
) -> list[tuple[str, str, str]]:
    """(query, positive) pairs → triples, with a given negative for the query or a random other sentence.

    Random negatives are drawn from the pairs' other sentences, never one sharing half of the
    query's or the positive's words.
    """
    rng = random.Random(seed)
    pool = sorted({sentence for pair in pairs for sentence in pair})
    triples = []
    for query, positive in pairs:
        candidates = (negatives or {}).get(query)
        if candidates:
            triples.append((query, positive, rng.choice(candidates)))
            continue
        own = {query, positive}
        own_words = [set(query.lower().split()), set(positive.lower().split())]
        for _ in range(50):
            negative = rng.choice(pool)
            words = set(negative.lower().split())
            if negative not in own and all(
                len(words & w) / max(len(words | w), 1) < 0.5 for w in own_words
            ):
                triples.append((query, positive, negative))
                break
    return triples


def build_training_triplets(
    triples: Iterable[tuple[str, str, str]],
    *,
    exclude_sentences: Iterable[str] = (),
    words: int = 40,
    seed: int = 0,
    limit: int | None = None,
):
    """(query, positive sentence, negative sentence) → SLICE triplets with both sentences inside context.

    The positive and the negative are placed verbatim inside context made of the other training
    sentences, in the dev set's styles (preceding, following, surrounding, clause). Any triple that
    mentions a sentence of ``exclude_sentences`` (e.g. every sentence of the dev set) is dropped.
    Returns a ``Dataset`` with ``anchor``, ``positive``, ``negative`` (the passages) and, for
    inspection, ``positive_span`` and ``negative_span`` (the sentences placed).
    """
    import datasets

    excluded = {one_line(sentence) for sentence in exclude_sentences}
    kept = []
    for triple in triples:
        cleaned = tuple(one_line(text) for text in triple)
        if any(not text for text in cleaned) or excluded.intersection(cleaned):
            continue
        kept.append(cleaned)
    if limit is not None:
        kept = random.Random(seed).sample(kept, min(limit, len(kept)))
    if len(kept) < 2:
        raise ValueError(f"need at least 2 usable triples to build context, got {len(kept)}.")
    positive_pairs = [{"sentence1": q, "sentence2": p, "score": 5.0} for q, p, _ in kept]
    negative_pairs = [{"sentence1": q, "sentence2": n, "score": 0.0} for q, _, n in kept]
    positives = make_context(positive_pairs, seed=seed, words=words)
    negatives = make_context(negative_pairs, seed=seed + 1, words=words)
    return datasets.Dataset.from_dict(
        {
            "anchor": [q for q, _, _ in kept],
            "positive": positives["passage"],
            "negative": negatives["passage"],
            "positive_span": positives["paraphrase"],
            "negative_span": negatives["paraphrase"],
        }
    )


def offline_training_triplets(
    data_dir: str | os.PathLike,
    *,
    dev_path: str | os.PathLike | None = None,
    sources: Sequence[str] = ("snli", "sick", "stsb", "ppdb"),
    min_score: float = 4.0,
    words: int = 40,
    seed: int = 0,
    limit: int | None = None,
):
    """The offline SLICE training set from the shared data folder (see ``shared/DATA.md``).

    Sources: ``snli`` (dev and test triplets), ``sick`` (relatedness ≥ ``min_score``), ``stsb``
    (STS-B *train* pairs with score ≥ ``min_score``), ``ppdb`` (PEARL's filtered phrase pairs, with
    their negatives). Sentences of the STS-B file at ``dev_path`` (the dev set is built from it)
    are excluded.
    """
    data_dir = os.fspath(data_dir)
    triples: list[tuple[str, str, str]] = []
    for source in sources:
        if source == "snli":
            for split in ("dev", "test"):
                triples += read_snli_triplets(
                    os.path.join(data_dir, "snli", f"snli_{split}_triplets.tsv")
                )
        elif source == "sick":
            triples += pairs_to_triples(
                read_sick_pairs(os.path.join(data_dir, "sick", "SICK.txt"), min_score), seed=seed
            )
        elif source == "stsb":
            rows = read_stsb(os.path.join(data_dir, "stsbenchmark", "sts-train.csv"))
            pairs = [
                (row["sentence1"], row["sentence2"])
                for row in rows
                if float(row["score"]) >= min_score
            ]
            triples += pairs_to_triples(pairs, seed=seed)
        elif source == "ppdb":
            positives, negatives = read_ppdb_pairs(
                os.path.join(data_dir, "pearl_eval", "ppdb", "ppdb_filtered.json")
            )
            triples += pairs_to_triples(positives, negatives, seed=seed)
        else:
            raise ValueError(f"unknown source {source!r}; choose from snli, sick, stsb, ppdb.")
    excluded: set[str] = set()
    if dev_path is not None:
        for row in read_stsb(dev_path):
            excluded.update((row["sentence1"], row["sentence2"]))
    return build_training_triplets(
        triples, exclude_sentences=excluded, words=words, seed=seed, limit=limit
    )


OFFLINE_SOURCES = ("stsb", "sick", "snli", "parabank")


def offline_passages(
    data_dir: str | os.PathLike,
    *,
    sources: Sequence[str] = OFFLINE_SOURCES,
    exclude_paths: Sequence[str | os.PathLike] = (),
    min_words: int = 20,
    max_words: int = 80,
    seed: int = 0,
    limit: int | None = None,
):
    """Distillation passages from the shared data folder (see ``shared/DATA.md``).

    Sources: ``stsb`` (STS-B *train* sentences), ``sick`` (SICK sentences), ``snli`` (SNLI dev and
    test sentences), ``parabank`` (Nugget's ParaBank documents, train split: real multi-sentence
    text). Sentences of ``exclude_paths`` (your dev set, and STS-B dev, which it is built from) are
    removed. Pre-tokenised sources are detokenised.
    """
    data_dir = os.fspath(data_dir)
    texts: list[str] = []
    for source in sources:
        if source == "stsb":
            rows = read_stsb(os.path.join(data_dir, "stsbenchmark", "sts-train.csv"))
            texts += list(dict.fromkeys(list(rows["sentence1"]) + list(rows["sentence2"])))
        elif source == "sick":
            with open(
                os.path.join(data_dir, "sick", "SICK.txt"), encoding="utf-8", newline=""
            ) as handle:
                rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
            texts += list(
                dict.fromkeys(
                    [row["sentence_A"] for row in rows] + [row["sentence_B"] for row in rows]
                )
            )
        elif source == "snli":
            lines: list[str] = []
            for name in ("s1.dev", "s2.dev", "s1.test", "s2.test"):
                lines += map(detokenize, read_texts(os.path.join(data_dir, "snli", name)))
            texts += list(dict.fromkeys(lines))
        elif source == "parabank":
            path = os.path.join(
                data_dir, "nugget_pi", "paraphrase_identification", "train", "docs.txt"
            )
            with _open_text(path) as handle:  # "id<TAB>document" rows
                documents = [
                    row[-1]
                    for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
                    if row
                ]
            texts += map(detokenize, read_texts(documents))
        else:
            raise DataFormatError(
                f"unknown source {source!r}; choose from {', '.join(OFFLINE_SOURCES)}."
            )
    excluded = evaluation_sentences(exclude_paths)
    return cut_passages(
        texts,
        min_words=min_words,
        max_words=max_words,
        exclude_sentences=excluded,
        seed=seed,
        limit=limit,
    )
