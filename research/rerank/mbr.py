"""Expected word-F1 (minimum Bayes risk) decoding of the re-ranker's candidates against its argmax, judged without
held-out data as ``realtext_cv.py`` judges a setting: STS-B-Context's even strong rows (fitted on the embedded, made
and real-text tune rows) and the real-text tune half, leave-tune-out (5 folds).

Each candidate ``j`` is scored ``sum_i p_i F1(i, j)``, ``p`` the re-ranker's softmax at temperature ``T``
(``mbr:T``); ``argmax`` is the shipped pick.

    python research/rerank/mbr.py --cache runs/rerank-minilm --k 40 --l2 3e-2 --weight 40 \
        --decode argmax mbr:0.5 mbr:1 mbr:2
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realtext_cv import DOMAINS, domains  # noqa: E402
from study import STRONG, features, fit_softmax, selected, with_derived, word_range  # noqa: E402


def items_with_ranges(cache: str, name: str, k: int) -> list[dict]:
    """``study.build``'s items, each with its candidates' word ranges (cached beside the others)."""
    path = os.path.join(cache, f"{name}-k{k}.ranges.pkl")
    if os.path.exists(path):
        with open(path, "rb") as handle:
            return pickle.load(handle)
    with open(os.path.join(cache, f"{name}.pkl"), "rb") as handle:
        rows = pickle.load(handle)
    items = []
    for d in rows:
        x, starts, lengths, names = features(d, k)
        ranges = np.array([word_range(d, s, s + n) for s, n in zip(starts, lengths)])
        gold = d["place"]
        label = (
            np.array([tuple(r) == gold for r in ranges], float) if gold else np.zeros(len(ranges))
        )
        f1 = pair_f1(ranges, np.array([gold]))[:, 0] if gold else np.zeros(len(ranges))
        items.append(
            dict(
                x=x,
                label=label,
                f1=f1,
                names=names,
                gold=d["gold"],
                located=gold is not None,
                ranges=ranges,
            )
        )
    with open(path, "wb") as handle:
        pickle.dump(items, handle)
    return items


def pair_f1(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Word-F1 of every range of ``a (n, 2)`` against every range of ``b (m, 2)``."""
    common = np.clip(np.minimum(a[:, 1:], b[:, 1].T) - np.maximum(a[:, :1], b[:, 0].T), 0, None)
    total = (a[:, 1:] - a[:, :1]) + (b[:, 1] - b[:, 0]).T
    return np.where(total > 0, 2 * common / np.maximum(total, 1e-9), 0.0)


def pick(item: dict, columns: np.ndarray, model, decode: str) -> int:
    w, mean, std = model
    logits = ((item["x"][:, columns] - mean) / std) @ w
    if decode == "argmax":
        return int(np.argmax(logits))
    p = np.exp((logits - logits.max()) / float(decode.split(":")[1]))
    return int(np.argmax((p / p.sum()) @ pair_f1(item["ranges"], item["ranges"])))


def scores(items: list[dict], picks: list[int]) -> tuple[float, float]:
    exact = np.mean([it["label"][p] for it, p in zip(items, picks)])
    return 100 * float(exact), 100 * float(np.mean([it["f1"][p] for it, p in zip(items, picks)]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache", default="runs/rerank")
    parser.add_argument("--k", type=int, default=40)
    parser.add_argument("--l2", type=float, default=3e-2)
    parser.add_argument("--weight", type=int, default=40, help="times the tune rows are counted")
    parser.add_argument("--decode", nargs="+", default=["argmax", "mbr:0.5", "mbr:1", "mbr:2"])
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    sets = {
        n: items_with_ranges(args.cache, n, args.k) for n in ("dev", "embedded", "made", "realtext")
    }
    own = with_derived(sets["dev"])
    for name in ("embedded", "made", "realtext"):
        with_derived(sets[name])
    columns = selected(
        argparse.Namespace(features=None, more=[], without=[], drop=[]),
        sets["dev"][0]["names"],
        own,
    )
    base, realtext, dev = sets["embedded"] + sets["made"], sets["realtext"], sets["dev"]
    even = [dev[i] for i in range(0, len(dev), 2) if dev[i]["located"] and dev[i]["gold"] >= STRONG]
    model = fit_softmax(base + realtext * args.weight, columns, args.l2)
    folds = []
    for fold in range(5):
        held = set(range(fold, len(realtext), 5))
        rest = [it for i, it in enumerate(realtext) if i not in held]
        folds.append((held, fit_softmax(base + rest * args.weight, columns, args.l2)))
    kinds = domains(args.cache)
    print("| decoding | even strong: exact / F1 | leave-tune-out legal | tech | dialogue | all |")
    for decode in args.decode:
        even_scores = scores(even, [pick(it, columns, model, decode) for it in even])
        picks = [0] * len(realtext)
        for held, fitted in folds:
            for i in held:
                picks[i] = pick(realtext[i], columns, fitted, decode)
        cells = []
        for domain in (*DOMAINS, None):
            rows = [i for i, d in enumerate(kinds) if domain is None or d == domain]
            exact, f1 = scores([realtext[i] for i in rows], [picks[i] for i in rows])
            cells.append(f"{exact:.1f} / {f1:.1f}")
        print(
            f"| {decode} | {even_scores[0]:.1f} / {even_scores[1]:.2f} | "
            + " | ".join(cells)
            + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()
