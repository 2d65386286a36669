"""Training triplets for SLICE: MS MARCO as users have it, and an offline builder from sentence data.

A SLICE triplet is ``(anchor, positive, negative)``: a query, a passage holding a span similar to it,
and a passage without one. MS MARCO triples are that already. Sentence data reachable offline
(SNLI triplets, SICK, STS-B *train*, PPDB phrase pairs) becomes triplets by placing the positive
and the negative sentence verbatim inside context, exactly as the STS-B-Context dev set is built
(:func:`slice_st.data.make_context`), from the training sentences only. Sentences of the dev set are
excluded so that training never sees them.
"""

from __future__ import annotations

import csv
import json
import os
import random
from collections.abc import Iterable, Sequence

from slice_st.data.stsb import make_context, read_stsb
from slice_st.errors import DataFormatError
from slice_st.text import detokenize, one_line, require


def _open_text(path: str | os.PathLike):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such file: {path}")
    return open(path, encoding="utf-8", newline="")


def read_msmarco_triples(path: str | os.PathLike, *, fix_text: bool = True, limit: int | None = None):
    """MS MARCO training triples from a TSV of ``query, positive passage, negative passage`` → ``Dataset``.

    ``fix_text`` repairs mojibake (UTF-8 read as cp1252, e.g. ``donâ€™t``) with ftfy. Rows with the
    wrong number of columns or an empty field raise :class:`~slice_st.errors.DataFormatError` naming
    the file and line.
    """
    datasets = require("datasets", "train", "reading MS MARCO triples")
    ftfy = require("ftfy", "train", "repairing MS MARCO text")

    columns: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    with _open_text(path) as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 3:
                raise DataFormatError(
                    f"{path}, line {number}: expected 3 tab-separated fields (query, positive, negative), got "
                    f"{len(fields)}."
                )
            if fix_text:
                fields = [ftfy.fix_text(field) for field in fields]
            for name, value in zip(columns, fields):
                if not value.strip():
                    raise DataFormatError(f"{path}, line {number}: the {name} field is empty.")
                columns[name].append(value.strip())
            if limit is not None and len(columns["anchor"]) >= limit:
                break
    if not columns["anchor"]:
        raise DataFormatError(f"{path}: no triples found.")
    return datasets.Dataset.from_dict(columns)


def msmarco_triples_from_hub(
    dataset_id: str = "sentence-transformers/msmarco-bm25",
    subset: str = "triplet",
    split: str = "train",
    limit: int | None = None,
):
    """MS MARCO (query, positive, negative) triples from the Hugging Face Hub (needs network access).

    The sentence-transformers MS MARCO datasets have ``query``/``positive``/``negative`` columns;
    they are renamed to ``anchor``/``positive``/``negative``.
    """
    datasets = require("datasets", "train", "loading Hub triples")

    dataset = datasets.load_dataset(dataset_id, subset, split=split)
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    if "query" in dataset.column_names:
        dataset = dataset.rename_column("query", "anchor")
    missing = {"anchor", "positive", "negative"} - set(dataset.column_names)
    if missing:
        raise DataFormatError(f"{dataset_id}: missing columns {sorted(missing)}; has {dataset.column_names}.")
    return dataset.select_columns(["anchor", "positive", "negative"])


def read_snli_triplets(path: str | os.PathLike) -> list[tuple[str, str, str]]:
    """SNLI triplets TSV (header ``anchor, positive, negative``; pre-tokenised text) → list of triples."""
    triples = []
    with _open_text(path) as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["anchor", "positive", "negative"]:
            raise DataFormatError(f"{path}: expected a header 'anchor<TAB>positive<TAB>negative', got {header!r}.")
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
            raise DataFormatError(f"{path}: expected columns {sorted(required)}, got {reader.fieldnames}.")
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
            raise DataFormatError(f"{path}, item {number}: expected [phrase, phrase, 'pos'|'neg'], got {row!r}.")
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
            if negative not in own and all(len(words & w) / max(len(words | w), 1) < 0.5 for w in own_words):
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
    datasets = require("datasets", "train", "building training triplets")

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
                triples += read_snli_triplets(os.path.join(data_dir, "snli", f"snli_{split}_triplets.tsv"))
        elif source == "sick":
            triples += pairs_to_triples(
                read_sick_pairs(os.path.join(data_dir, "sick", "SICK.txt"), min_score), seed=seed
            )
        elif source == "stsb":
            rows = read_stsb(os.path.join(data_dir, "stsbenchmark", "sts-train.csv"))
            pairs = [(row["sentence1"], row["sentence2"]) for row in rows if float(row["score"]) >= min_score]
            triples += pairs_to_triples(pairs, seed=seed)
        elif source == "ppdb":
            positives, negatives = read_ppdb_pairs(os.path.join(data_dir, "pearl_eval", "ppdb", "ppdb_filtered.json"))
            triples += pairs_to_triples(positives, negatives, seed=seed)
        else:
            raise ValueError(f"unknown source {source!r}; choose from snli, sick, stsb, ppdb.")
    excluded: set[str] = set()
    if dev_path is not None:
        for row in read_stsb(dev_path):
            excluded.update((row["sentence1"], row["sentence2"]))
    return build_training_triplets(triples, exclude_sentences=excluded, words=words, seed=seed, limit=limit)
