"""Caches the real-text dev set's tune half for the re-ranker study (``research/rerank/study.py``), in the format
of ``research/rerank/cache.py``'s rows: each tune query against its gold paragraph, labelled with the gold span's
words (``place``), gold 5 (a real match). With ``--stsb``, the STS-B-Context dev half's rows too (``dev.pkl``).

    python research/realtext/rerank_cache.py --out runs/rerank [--stsb $DATA/stsb_context/stsb-context-dev.tsv]
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rerank"))
from cache import dev_rows, single_pass  # noqa: E402  (research/rerank is a folder of scripts)

from research.realtext.evaluate import load, word_positions  # noqa: E402
from slice_st import load_model  # noqa: E402


def realtext_rows(model, split: str = "tune") -> list[dict]:
    """The split's queries against their gold paragraphs (those that fit one window), as the study's rows."""
    documents, queries = load()
    queries = [q for q in queries if q["split"] == split]
    limit = model.max_seq_length - 2
    fits = [
        q
        for q in queries
        if len(model.tokenizer.tokenize(documents[q["paragraph"]]["text"])) <= limit
    ]
    rows = single_pass(
        model, [q["query"] for q in fits], [documents[q["paragraph"]]["text"] for q in fits]
    )
    for d, q in zip(rows, fits):
        words = sorted(word_positions(d["passage"], q["start"], q["end"]))
        d["gold"], d["paraphrase"], d["place"], d["id"] = (
            5.0,
            q["span"],
            (words[0], words[-1] + 1),
            q["id"],
        )
    print(
        f"{split}: {len(rows)} of {len(queries)} queries (the others' paragraphs exceed one window)",
        flush=True,
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/rerank")
    parser.add_argument(
        "--model", default=None, help="the model (default: slice_st.load_model()'s)"
    )
    parser.add_argument(
        "--stsb", default=None, help="the STS-B-Context dev file: cache its rows too (dev.pkl)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    model = load_model(args.model).eval()
    parts = {"realtext": realtext_rows(model)}
    if args.stsb:
        parts["dev"] = dev_rows(model, args.stsb)
    for name, rows in parts.items():
        with open(os.path.join(args.out, f"{name}.pkl"), "wb") as handle:
            pickle.dump(rows, handle)


if __name__ == "__main__":
    main()
