"""A SLICE model as a late-interaction retriever: slice-minilm and its base, each as a single-vector model (cosine of
``encode``) and as a ``MultiVectorEncoder`` (``slice_st.multi_vector.to_multi_vector``: its token vectors, MaxSim),
side by side on two retrieval sets, plus slice-minilm's own span index (a document ranked by its best span).

* MS MARCO toy (``$DATA/msmarco_toy/triplets/raw.tsv``): 100 queries; the corpus is their positive and negative
  passages (200); the positive is the one relevant passage.
* STS-B-Context dev half (``$DATA/stsb_context/stsb-context-dev.tsv``): the rows whose pair scores >= 4; the query is
  the row's sentence, the corpus all 512 passages, the relevant one the passage holding the sentence's paraphrase.

Prints MRR@10 and recall@1 (×100) per system and set.

    python benchmarks/bench_multi_vector.py --data ../shared/data
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path

import numpy as np
import torch

import slice_st
from slice_st.data import read_stsb_context
from slice_st.multi_vector import to_multi_vector


def msmarco(data: Path) -> tuple[list[str], list[str], list[int]]:
    rows = [
        line.rstrip("\n").split("\t")
        for line in (data / "msmarco_toy/triplets/raw.tsv").open(encoding="utf-8")
    ]
    corpus = list(dict.fromkeys(text for row in rows for text in row[1:3]))
    return [row[0] for row in rows], corpus, [corpus.index(row[1]) for row in rows]


def stsb_context(data: Path) -> tuple[list[str], list[str], list[int]]:
    rows = list(read_stsb_context(data / "stsb_context/stsb-context-dev.tsv"))
    corpus = list(dict.fromkeys(row["passage"] for row in rows))
    kept = [row for row in rows if float(row["goldsim"]) >= 4.0]
    return [row["line"] for row in kept], corpus, [corpus.index(row["passage"]) for row in kept]


def metrics(scores: np.ndarray, relevant: list[int]) -> tuple[float, float]:
    """MRR@10 and recall@1 of ``scores`` ``(Q, N)``."""
    ranks = (scores > scores[np.arange(len(relevant)), relevant][:, None]).sum(axis=1)  # 0: first
    return float(np.mean(np.where(ranks < 10, 1.0 / (ranks + 1), 0.0))), float(np.mean(ranks == 0))


def dense(model, queries, corpus) -> np.ndarray:
    q = model.encode_query(queries, convert_to_tensor=True, normalize_embeddings=True)
    d = model.encode_document(corpus, convert_to_tensor=True, normalize_embeddings=True)
    return (q @ d.T).cpu().numpy()


def late_interaction(colbert, queries, corpus) -> np.ndarray:
    return (
        colbert.similarity(colbert.encode_query(queries), colbert.encode_document(corpus))
        .cpu()
        .numpy()
    )


def span_index(model, queries, corpus) -> np.ndarray:
    """Each document scored by its best span (the default scorer, spans of 1..20 words); unranked ones: -inf."""
    index = slice_st.SpanIndex.build(corpus, model, max_span=20)
    scores = np.full((len(queries), len(corpus)), -np.inf)
    for row, matches in enumerate(index.search(queries, top_k=10, per_document=1)):
        for match in matches:
            scores[row, match.text_index] = match.score
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument(
        "--only", default="", help="run only the systems whose name holds this text"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    sets = {"MS MARCO toy": msmarco(args.data), "STS-B-Context ≥4": stsb_context(args.data)}
    models = {
        "all-MiniLM-L6-v2": slice_st.load_model("base"),
        "slice-minilm": slice_st.load_model(),
    }
    systems = {}
    for name, model in models.items():
        systems[f"{name}, encode (cosine)"] = lambda q, c, m=model: dense(m, q, c)
        colbert = to_multi_vector(model)
        systems[f"{name} as MultiVectorEncoder (MaxSim)"] = lambda q, c, m=colbert: (
            late_interaction(m, q, c)
        )
    skip = to_multi_vector(models["slice-minilm"], skiplist_words=list(string.punctuation))
    systems["slice-minilm as MultiVectorEncoder, punctuation skiplist"] = lambda q, c: (
        late_interaction(skip, q, c)
    )
    systems["slice-minilm SpanIndex (best span, top 10)"] = lambda q, c: span_index(
        models["slice-minilm"], q, c
    )
    print("| system | " + " | ".join(f"{name} MRR@10 | R@1" for name in sets) + " |")
    print("| --- " * (1 + 2 * len(sets)) + "|")
    for system, run in ((name, run) for name, run in systems.items() if args.only in name):
        cells = []
        for queries, corpus, relevant in sets.values():
            mrr, recall = metrics(run(queries, corpus), relevant)
            cells += [f"{100 * mrr:.1f}", f"{100 * recall:.1f}"]
        print(f"| {system} | " + " | ".join(cells) + " |", flush=True)
    print(
        "queries / documents:",
        ", ".join(f"{name} {len(s[0])} / {len(s[1])}" for name, s in sets.items()),
    )


if __name__ == "__main__":
    main()
