"""Cache, once, what the re-ranker study needs from the single pass: every span's cosine (1..20 words) per row.

Rows: the STS-B-Context dev half (``dev``) and weakly labelled rows (``weak``): STS-B train pairs whose second sentence
replaces the paraphrase of an even dev row's passage (and a determiner just before it if the sentence starts with
one; the passage's case and end punctuation kept), labelled with its own place; the query is the first sentence. Odd
dev rows' passages are never used for weak rows. ``--made N``: also ``made`` rows, STS-B train pairs in context glued
from other STS-B train sentences (data a shipped re-ranker may train on).

    python research/rerank/cache.py --data /work/shared/data --out runs/rerank
"""

from __future__ import annotations

import argparse
import csv
import os
import pickle
import random
import re

import numpy as np
import torch

from slice_st import load_model
from slice_st.data import read_stsb_context
from slice_st.encode import embed_texts, encode_windows, resolve_span_config
from slice_st.evaluation.localisation import locate_paraphrase, span_words
from slice_st.scoring import DETERMINERS, mark_prefix, query_profiles, unit_flags
from slice_st.spans import prefix_sums, span_sum_norms
from slice_st.tokens import text_units

MAX_SPAN = 20


def single_pass(model, queries: list[str], passages: list[str]) -> list[dict]:
    """Per row: ``grid`` (U, 20) cosines of every span, unit char offsets, flags, marks, query profile."""
    config = resolve_span_config(model, 1, MAX_SPAN, "word")
    vectors = torch.nn.functional.normalize(
        embed_texts(model, queries, batch_size=32).float(), dim=-1
    )
    out: list[dict] = [{} for _ in passages]
    with torch.no_grad():
        for batch in encode_windows(model, passages, config, 32, False, 16):
            for part in batch.rows(32):
                sums = prefix_sums(part.token_embeddings)
                unit_prefix = torch.gather(
                    sums, 1, part.boundaries[..., None].expand(-1, -1, sums.shape[-1])
                )
                norms = span_sum_norms(
                    part.token_embeddings, part.boundaries, part.num_units, 1, MAX_SPAN
                )
                for b, window in enumerate(part.windows):
                    n, text = int(part.num_units[b]), window.text_index
                    assert window.char_start == 0, "passages fit one window"
                    dots = (unit_prefix[b, : n + 1] @ vectors[text]).numpy()
                    grid = np.full((n, MAX_SPAN), np.nan, np.float32)
                    for length in range(1, min(MAX_SPAN, n) + 1):
                        grid[: n - length + 1, length - 1] = (
                            dots[length:] - dots[:-length]
                        ) / norms[b, : n - length + 1, length - 1].numpy()
                    chars = np.stack(
                        [part.char_starts[b, :n].numpy(), part.char_ends[b, :n].numpy()], 1
                    )
                    out[text] = {"grid": grid, "chars": chars}
    lengths = [len(starts) for starts, _, _ in text_units(model.tokenizer, queries)]
    for row, (query, passage, length) in enumerate(zip(queries, passages, lengths)):
        d = out[row]
        units = [passage[a:b] for a, b in d["chars"]]
        d.update(
            query=query, passage=passage, units=units, profile=query_profiles([query], [length])[0]
        )
        d["flags"] = unit_flags(units)
        d["marks"] = mark_prefix(d["flags"])
        # the evaluator's words: each unit's word index (-1: no word), for exact / word-F1 as the evaluator counts
        words = span_words(passage)
        d["unit_word"] = np.array(
            [
                next((i for i, (s, e, _) in enumerate(words) if s < b and a < e), -1)
                for a, b in d["chars"]
            ]
        )
    return out


def dev_rows(model, path: str) -> list[dict]:
    data = read_stsb_context(path)
    rows = single_pass(model, list(data["line"]), list(data["passage"]))
    for d, paraphrase, gold in zip(rows, data["paraphrase"], data["goldsim"]):
        d["gold"], d["paraphrase"], d["place"] = (
            float(gold),
            paraphrase,
            locate_paraphrase(d["passage"], paraphrase),
        )
    return rows


def _insert(passage: str, place: tuple[int, int], sentence: str) -> str:
    """``passage`` with its words ``place`` replaced by ``sentence``, in the passage's case and end punctuation."""
    words = span_words(passage)
    start, end = words[place[0]][0], words[place[1] - 1][1]
    old, new = passage[start:end], sentence.strip()
    tail = re.search(r"[^\w]*$", old).group()
    new = re.sub(r"[.!?]+$", "", new) + tail
    if old[:1].islower() and not re.match(r"I\b", new):
        new = new[:1].lower() + new[1:]
    return passage[:start] + new + passage[end:]


def _with_determiner(
    passage: str, place: tuple[int, int], sentence: str, widen: str = "sentence"
) -> tuple[int, int]:
    """``place`` widened to a determiner just before it ("the | young couple sitting") when ``sentence`` starts with
    one (``widen="sentence"``): two determiners in a row ("the a dog is ...") are never in real text (one before a
    sentence without its own, "the | coroner confirms ...", is, and stays). ``"always"`` / ``"never"``: for
    comparison."""
    words = span_words(passage)
    first = span_words(sentence)[:1]
    wanted = widen == "always" or (widen == "sentence" and first and first[0][2] in DETERMINERS)
    if place[0] > 0 and wanted:
        start, end, _ = words[place[0] - 1]
        if passage[start:end].lower() in DETERMINERS:
            return place[0] - 1, place[1]
    return place


def weak_rows(
    model, data_dir: str, dev: list[dict], count: int, widen: str, seed: int = 0
) -> list[dict]:
    pairs = []
    with open(os.path.join(data_dir, "stsbenchmark", "sts-train.csv"), encoding="utf-8") as handle:
        for fields in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(fields) >= 7:
                pairs.append((float(fields[4]), fields[5], fields[6]))
    rng = random.Random(seed)
    rng.shuffle(pairs)
    hosts = [d for i, d in enumerate(dev) if i % 2 == 0 and d["place"] is not None]
    made = []
    for score, first, second in pairs[:count]:
        host = rng.choice(hosts)
        passage = _insert(
            host["passage"], _with_determiner(host["passage"], host["place"], second, widen), second
        )
        made.append((score, first, second, passage))
    return labelled_rows(model, made)


def labelled_rows(model, made: list[tuple[float, str, str, str]]) -> list[dict]:
    """Rows of ``(gold, query, paraphrase, passage)``: single-pass rows labelled with the paraphrase's place (those
    whose passage holds it and has at most 200 words)."""
    queries, passages, meta = [], [], []
    for score, first, second, passage in made:
        place = locate_paraphrase(passage, second)
        if place is None or len(passage.split()) > 200:
            continue
        queries.append(first)
        passages.append(passage)
        meta.append((score, second, place))
    rows = single_pass(model, queries, passages)
    for d, (score, second, place) in zip(rows, meta):
        d["gold"], d["paraphrase"], d["place"] = score, second, place
    return rows


def made_rows(model, data_dir: str, count: int, seed: int = 0) -> list[dict]:
    """STS-B train pairs with the second sentence placed verbatim inside context glued from other STS-B train
    sentences (:func:`research.context.make_context`), labelled with its place: rows made only of data whose licence
    allows commercial use (CC BY-SA 4.0), for a re-ranker that ships."""
    from research.context import make_context
    from slice_st.data.stsb import read_stsb

    made = make_context(
        read_stsb(os.path.join(data_dir, "stsbenchmark", "sts-train.csv")), seed=seed, limit=count
    )
    kept = [row for row in made if locate_paraphrase(row["passage"], row["paraphrase"]) is not None]
    rows = single_pass(model, [row["line"] for row in kept], [row["passage"] for row in kept])
    for d, row in zip(rows, kept):
        d["gold"], d["paraphrase"] = float(row["goldsim"]), row["paraphrase"]
        d["place"] = locate_paraphrase(row["passage"], row["paraphrase"])
    return rows


#: Lead-ins and joins written for this project (no outside text): what puts a sentence mid-sentence, as a writer
#: working a phrase into a passage does ("Katie saw that a girl is brushing her hair in front of the mirror").
LEADS = (
    "She noticed that",
    "Everyone could see that",
    "The report said that",
    "It turned out that",
    "We were told that",
    "According to the witness,",
    "In the photo,",
    "Later that day,",
    "At the meeting, someone mentioned that",
    "He explained that",
    "The note on the door said",
    "For a moment it seemed that",
    "Meanwhile,",
    "In the background,",
    "As the video shows,",
    "Nobody expected that",
    "On the news, they said",
    "Just as the lights came on,",
    "I remember that",
    "The article claims that",
)
JOINS = (
    ", while",
    ", and",
    ", but",
    " because",
    ", just as",
    " when",
    ", although",
    ", so",
    " after",
    " before",
)


def _mid_sentence(sentence: str) -> str:
    """``sentence`` as the middle of another: no end punctuation, a capital first letter lowered (not "I ...")."""
    body = re.sub(r"[.!?]+$", "", sentence.strip())
    if body[:1].isupper() and not re.match(r"I\b", body) and body[1:2].islower():
        body = body[:1].lower() + body[1:]
    return body


def embedded_rows(model, data_dir: str, count: int, seed: int = 0) -> list[dict]:
    """STS-B train pairs with the second sentence worked into the middle of a sentence of context (a lead-in of
    :data:`LEADS`, lowered, without its end punctuation, then a join of :data:`JOINS` and another STS-B train
    sentence), between other STS-B train sentences, labelled with its place: data a shipped re-ranker may train on."""
    from slice_st.data.stsb import read_stsb

    pairs = [
        (float(row["score"]), row["sentence1"], row["sentence2"])
        for row in read_stsb(os.path.join(data_dir, "stsbenchmark", "sts-train.csv"))
    ]
    rng = random.Random(seed)
    rng.shuffle(pairs)
    others = [sentence for _, first, second in pairs for sentence in (first, second)]
    made = []
    for score, first, second in pairs[:count]:
        lead = rng.choice(LEADS) + " " if rng.random() < 0.8 else ""
        body = _mid_sentence(second) if lead else re.sub(r"[.!?]+$", "", second.strip())
        tail = (
            rng.choice(JOINS) + " " + _mid_sentence(rng.choice(others)) + "."
            if rng.random() < 0.7
            else "."
        )
        sentence = lead + body + tail
        before = [rng.choice(others) for _ in range(rng.randint(0, 2))]
        after = [rng.choice(others) for _ in range(rng.randint(0, 2))]
        made.append(
            (score, first, second, " ".join([*before, sentence[:1].upper() + sentence[1:], *after]))
        )
    return labelled_rows(model, made)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="/work/shared/data")
    parser.add_argument("--out", default="runs/rerank")
    parser.add_argument("--weak", type=int, default=3000)
    parser.add_argument(
        "--made", type=int, default=0, help="also cache this many made-context rows (made.pkl)"
    )
    parser.add_argument(
        "--embedded", type=int, default=0, help="also cache this many embedded rows (embedded.pkl)"
    )
    parser.add_argument("--no-dev", action="store_true", help="reuse the cached dev.pkl")
    parser.add_argument(
        "--model", default=None, help="the model (default: slice_st.load_model()'s)"
    )
    parser.add_argument(
        "--widen",
        choices=["sentence", "always", "never"],
        default="sentence",
        help="replace a determiner just before the host's paraphrase too: when the sentence starts with one (default)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    model = load_model(args.model)
    model.eval()
    if args.no_dev:
        with open(os.path.join(args.out, "dev.pkl"), "rb") as handle:
            dev = pickle.load(handle)
    else:
        dev = dev_rows(model, os.path.join(args.data, "stsb_context", "stsb-context-dev.tsv"))
        with open(os.path.join(args.out, "dev.pkl"), "wb") as handle:
            pickle.dump(dev, handle)
        print("dev", len(dev), flush=True)
    if args.weak:
        weak = weak_rows(model, args.data, dev, args.weak, args.widen)
        with open(os.path.join(args.out, "weak.pkl"), "wb") as handle:
            pickle.dump(weak, handle)
        print("weak", len(weak), flush=True)
    if args.made:
        made = made_rows(model, args.data, args.made)
        with open(os.path.join(args.out, "made.pkl"), "wb") as handle:
            pickle.dump(made, handle)
        print("made", len(made), flush=True)
    if args.embedded:
        embedded = embedded_rows(model, args.data, args.embedded)
        with open(os.path.join(args.out, "embedded.pkl"), "wb") as handle:
            pickle.dump(embedded, handle)
        print("embedded", len(embedded), flush=True)


if __name__ == "__main__":
    main()
