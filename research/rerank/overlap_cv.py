"""Leave-tune-out and the even strong rows with the shipped recipe (40 candidates, L2 3e-2, the tune half x40), the
re-ranker free to pick any candidate or only those overlapping the "phrase" scorer's best span (it then only moves
boundaries, never the place).

    python research/rerank/overlap_cv.py
"""

import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import argparse

import numpy as np
import torch
from realtext_cv import DOMAINS, domains
from study import STRONG, fit_softmax, load_items, selected, with_derived

torch.set_num_threads(1)
cache, k, l2, weight = "runs/rerank-minilm", 40, 3e-2, 40
sets = {n: load_items(cache, n, k) for n in ("dev", "embedded", "made", "realtext")}
own = with_derived(sets["dev"])
for n in ("embedded", "made", "realtext"):
    with_derived(sets[n])
names = sets["dev"][0]["names"]
ns = argparse.Namespace(features=None, without=[], more=[], drop=[])
columns = selected(ns, names, own)
plain = [n.split(":", 1)[1] for n in names]
rs, re_ = plain.index("rel_start"), plain.index("rel_end")


def pick(it, model, mode):
    w, mean, std = model
    logits = ((it["x"][:, columns] - mean) / std) @ w
    if mode == "overlap":
        s, e = it["x"][:, rs], it["x"][:, re_]
        ok = (s < e[0] - 1e-9) & (e > s[0] + 1e-9)
        logits = np.where(ok, logits, -np.inf)
    return int(np.argmax(logits))


def score(items, picks):
    return 100 * np.mean([it["label"][p] for it, p in zip(items, picks)]), 100 * np.mean(
        [it["f1"][p] for it, p in zip(items, picks)]
    )


base = sets["embedded"] + sets["made"]
rt, dev = sets["realtext"], sets["dev"]
even = [dev[i] for i in range(0, len(dev), 2) if dev[i]["located"] and dev[i]["gold"] >= STRONG]
full = fit_softmax(base + rt * weight, columns, l2)
folds = []
for fold in range(5):
    held = set(range(fold, len(rt), 5))
    folds.append(
        (
            held,
            fit_softmax(
                base + [it for i, it in enumerate(rt) if i not in held] * weight, columns, l2
            ),
        )
    )
kinds = domains(cache)
for mode in ("all", "overlap"):
    e = score(even, [pick(it, full, mode) for it in even])
    picks = [0] * len(rt)
    for held, model in folds:
        for i in held:
            picks[i] = pick(rt[i], model, mode)
    cells = []
    for d in (*DOMAINS, None):
        rows = [i for i, x in enumerate(kinds) if d is None or x == d]
        cells.append(
            "{:.1f} / {:.1f}".format(*score([rt[i] for i in rows], [picks[i] for i in rows]))
        )
    print(f"| {mode} | {e[0]:.1f} / {e[1]:.2f} | " + " | ".join(cells) + " |", flush=True)
