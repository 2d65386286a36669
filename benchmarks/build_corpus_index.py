"""Build (once) the real-text SpanIndex the index benchmarks reuse, and log its build throughput.

    python benchmarks/build_corpus_index.py --docs ../shared/data/nugget_pi/paraphrase_identification/train/docs.txt
    \
        --limit 500 -o runs/bench_index

Reads ``id TAB document`` lines (Nugget ``docs.txt``) in place; the index goes to a git-ignored folder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import _common  # noqa: E402,F401  (offline environment)


def read_docs(path: str, limit: int | None) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            doc_id, _, text = line.rstrip("\n").partition("\t")
            if text.strip():
                ids.append(doc_id)
                texts.append(text)
            if limit and len(ids) >= limit:
                break
    return ids, texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", required=True)
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    import slice_st

    torch.set_num_threads(args.threads)
    model = slice_st.load_model(device="cpu")
    ids, texts = read_docs(args.docs, None)
    # Real dirty text: a few documents hold runs of dot leaders whose 20-word spans exceed a model
    # window; the core refuses those (clear error). Skip them here and say how many.
    from slice_st.encode import model_window
    from slice_st.tokens import plan_windows

    kept_ids, kept, skipped = [], [], 0
    for doc_id, text in zip(ids, texts):
        try:
            plan_windows(model.tokenizer, [text], model_window(model), 20, 16)
        except ValueError:
            skipped += 1
            continue
        kept_ids.append(doc_id)
        kept.append(text)
        if len(kept) >= args.limit:
            break
    ids, texts = kept_ids, kept
    print(f"{skipped} documents skipped (spans do not fit a window)", flush=True)
    words = sum(len(t.split()) for t in texts)
    tokens = sum(len(model.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    start = time.perf_counter()
    index = slice_st.SpanIndex.build(texts, model, ids=ids, show_progress_bar=True)
    seconds = time.perf_counter() - start
    index.save(args.output)
    report = {
        "documents": len(texts),
        "words": words,
        "tokens": tokens,
        "build_seconds": round(seconds, 1),
        "documents_per_s": round(len(texts) / seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "source": args.docs,
        "limit": args.limit,
        "skipped": skipped,
    } | index.info()
    with open(os.path.join(args.output, "build_report.json"), "w") as handle:
        json.dump(report, handle, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
