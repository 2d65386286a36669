"""Choose a shipped re-ranker's settings without held-out data: for each (candidates k, L2, real-text weight, feature
set), fitted on the embedded + made rows and the real-text tune half, the STS-B-Context even rows' exact / word-F1
(strong rows; none of them trained on) and the real-text tune half's by domain, each tune query predicted by a model
fitted without its fold (leave-tune-out, 5 folds), as the study counts them (the label among the candidates).

    python research/rerank/realtext_cv.py --cache runs/rerank --k 20 40 --l2 1e-2 --weight 5
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study import STRONG, fit_softmax, load_items, selected, with_derived  # noqa: E402

QUERIES = Path(__file__).resolve().parents[1] / "realtext" / "queries.jsonl"
DOMAINS = ("legal", "tech", "dialogue")


def domains(cache: str) -> list[str]:
    """The domain of each cached real-text row (``realtext.pkl`` keeps the query ids)."""
    with open(QUERIES, encoding="utf-8") as handle:
        domain = {q["id"]: q["domain"] for q in map(json.loads, handle)}
    with open(os.path.join(cache, "realtext.pkl"), "rb") as handle:
        return [domain[d["id"]] for d in pickle.load(handle)]


def chosen(items: list[dict], columns: np.ndarray, model) -> list[int]:
    w, mean, std = model
    return [int(np.argmax(((it["x"][:, columns] - mean) / std) @ w)) for it in items]


def scores(items: list[dict], picks: list[int]) -> tuple[float, float]:
    exact = [it["label"][p] for it, p in zip(items, picks)]
    f1 = [it["f1"][p] for it, p in zip(items, picks)]
    return 100 * float(np.mean(exact)), 100 * float(np.mean(f1))


def leave_tune_out(base, realtext, weight, columns, l2, folds=5) -> list[int]:
    """Each real-text row's pick by a model fitted on ``base`` and the other folds (counted ``weight`` times)."""
    picks = [0] * len(realtext)
    for fold in range(folds):
        held = set(range(fold, len(realtext), folds))
        rest = [it for i, it in enumerate(realtext) if i not in held]
        model = fit_softmax(base + rest * weight, columns, l2)
        for i in held:
            picks[i] = chosen([realtext[i]], columns, model)[0]
    return picks


def evaluate(args, k: int, l2: float, weight: int) -> str:
    sets = {
        name: load_items(args.cache, name, k) for name in ("dev", "embedded", "made", "realtext")
    }
    own = with_derived(sets["dev"])
    for name in ("embedded", "made", "realtext"):
        with_derived(sets[name])
    columns = selected(args, sets["dev"][0]["names"], own)
    base = sets["embedded"][: args.rows] + sets["made"][: args.rows]
    realtext, dev = sets["realtext"], sets["dev"]
    strong_even = [
        dev[i] for i in range(0, len(dev), 2) if dev[i]["located"] and dev[i]["gold"] >= STRONG
    ]
    model = fit_softmax(base + realtext * weight, columns, l2)
    even = scores(strong_even, chosen(strong_even, columns, model))
    picks = leave_tune_out(base, realtext, weight, columns, l2)
    kinds = domains(args.cache)
    cells = []
    for domain in (*DOMAINS, None):
        rows = [i for i, d in enumerate(kinds) if domain is None or d == domain]
        exact, f1 = scores([realtext[i] for i in rows], [picks[i] for i in rows])
        phrase = scores([realtext[i] for i in rows], [0] * len(rows))
        cells.append(f"{exact:.1f} / {f1:.1f} ({phrase[0]:.1f} / {phrase[1]:.1f})")
    return (
        f"| k {k} l2 {l2:g} rt×{weight} {args.tag} | {even[0]:.1f} / {even[1]:.2f} | "
        + " | ".join(cells)
        + " |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache", default="runs/rerank")
    parser.add_argument("--k", type=int, nargs="+", default=[20])
    parser.add_argument("--l2", type=float, nargs="+", default=[1e-2])
    parser.add_argument(
        "--weight", type=int, nargs="+", default=[5], help="times the tune rows are counted"
    )
    parser.add_argument(
        "--rows", type=int, default=None, help="embedded and made rows used (default: all)"
    )
    parser.add_argument("--features", nargs="+", help="as study.py's")
    parser.add_argument("--with", dest="more", nargs="+", default=[])
    parser.add_argument("--without", nargs="+", default=[])
    parser.add_argument("--drop", nargs="*", default=[])
    parser.add_argument("--tag", default="", help="a label for the rows printed")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    print(
        "| setting | even strong: exact / F1 | leave-tune-out legal: exact / F1 (phrase) | tech | dialogue | all |"
    )
    for k in args.k:
        for l2 in args.l2:
            for weight in args.weight:
                print(evaluate(args, k, l2, weight), flush=True)


if __name__ == "__main__":
    main()
