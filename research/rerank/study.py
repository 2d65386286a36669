"""Re-rank the phrase scorer's top-k spans with a small learned model: features, training, held-out evaluation.

Reads the cache of ``cache.py``. Candidates: the top-``k`` spans of a row by the ``"phrase"`` score (overlaps allowed).
Labels: the candidate whose word range is the paraphrase's. Models are fitted on even dev rows (and/or weak rows), and
reported on odd rows (held out) and all rows: exact match and word-F1 on strong rows (gold >= 3) as the evaluator
counts them, Spearman of the chosen value, a paired bootstrap interval of the gain, and feature-group ablations.

    python research/rerank/study.py --cache runs/rerank
"""

from __future__ import annotations

import argparse
import os
import pickle

import numpy as np
from scipy.stats import spearmanr

from slice_st.rerank import MOVES, candidate_features, query_edges, query_word_ids, unit_words
from slice_st.scoring import SpanScorer, costs_of_spans

PHRASE = SpanScorer()
STRONG = 3.0


def row_scores(d: dict) -> np.ndarray:
    """(U, 20) phrase scores (nan where no span)."""
    grid = d["grid"]
    starts, lengths = np.nonzero(~np.isnan(grid))
    scores = np.full(grid.shape, np.nan, np.float64)
    scores[starts, lengths] = grid[starts, lengths] - costs_of_spans(
        PHRASE, d["flags"], d["marks"], d["profile"], starts, lengths + 1
    )
    return scores


def word_range(d: dict, start: int, end: int) -> tuple[int, int]:
    """The evaluator's word range of units ``start..end-1``."""
    inside = d["unit_word"][start:end]
    inside = inside[inside >= 0]
    return (int(inside[0]), int(inside[-1]) + 1) if len(inside) else (0, 0)


def candidates(d: dict, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scores = row_scores(d)
    flat = np.where(np.isnan(scores), -np.inf, scores).ravel()
    order = np.argsort(-flat, kind="stable")[:k]
    order = order[np.isfinite(flat[order])]
    starts, lengths = np.divmod(order, scores.shape[1])
    return starts, lengths + 1, scores


#: Feature groups (for the ablation): the package's features by name.
GROUP_OF = {
    **dict.fromkeys(["cos", "phrase", "gap_top", "gap_maxcos", "log_rank", "is_top"], "score"),
    **dict.fromkeys(
        [
            "len_short",
            "len_long",
            "start_word",
            "after_det",
            "end_word",
            "clause",
            "sentence",
            "open_end",
            "open_start",
        ],
        "costs",
    ),
    **dict.fromkeys(["cos_local_peak", "dcos_grow_max", "dcos_shrink_max"], "peak"),
    **{f"{kind}_{name}": "peak" for kind in ("dcos", "dscore", "dcost") for name, _, _ in MOVES},
    **dict.fromkeys(
        [
            "first_det",
            "first_start_word",
            "first_clause_before",
            "first_capital",
            "last_end_word",
            "last_clause_after",
            "last_sentence_end",
            "last_mark",
            "before_det",
            "before_start_word",
            "after_start_word",
            "after_end_word",
            "after_capital",
            "first_det_query_det",
            "after_det_query_det",
            "last_auxiliary",
            "before_auxiliary",
            "clause_rest_before",
            "clause_rest_after",
        ],
        "boundary",
    ),
    **dict.fromkeys(
        [
            "cand_in_query",
            "query_in_cand",
            "first_match",
            "last_match",
            "before_in_query",
            "after_in_query",
        ],
        "lexical",
    ),
    **dict.fromkeys(
        ["text_start", "text_end", "rel_start", "rel_end", "sentence_start"], "position"
    ),
}


#: The previous re-ranker's features that the package no longer computes, each derived exactly from those it does (to
#: compare the feature sets on the same cache): a duplicate of ``after_det``, the score deltas (the cosine delta minus
#: the cost delta), the deltas' maxima and the local-peak flag, the top flag.
DERIVED = {
    "before_det": lambda v: v["after_det"],
    **{f"dscore_{m}": (lambda v, m=m: v[f"dcos_{m}"] - v[f"dcost_{m}"]) for m, _, _ in MOVES},
    "cos_local_peak": lambda v: np.all([v[f"dcos_{m}"] <= 0 for m, _, _ in MOVES], axis=0) * 1.0,
    "dcos_grow_max": lambda v: np.maximum(v["dcos_grow_left"], v["dcos_grow_right"]),
    "dcos_shrink_max": lambda v: np.maximum(v["dcos_shrink_left"], v["dcos_shrink_right"]),
    "is_top": lambda v: (v["log_rank"] == 0) * 1.0,
}

#: The feature set of the previous shipped re-ranker (50 features).
PREVIOUS = (
    "cos phrase gap_top gap_maxcos log_rank is_top len_short len_long start_word after_det end_word clause sentence "
    "open_end open_start dcos_grow_left dscore_grow_left dcos_grow_right dscore_grow_right dcos_shrink_left "
    "dscore_shrink_left dcos_shrink_right dscore_shrink_right cos_local_peak dcos_grow_max dcos_shrink_max first_det "
    "first_start_word first_clause_before first_capital last_end_word last_clause_after last_sentence_end last_mark "
    "before_det before_start_word after_start_word after_end_word after_capital cand_in_query query_in_cand "
    "first_match last_match before_in_query after_in_query text_start text_end rel_start rel_end sentence_start"
).split()


def with_derived(items: list[dict]) -> int:
    """Append the :data:`DERIVED` features the package does not compute to each item (in place); returns the number
    of the package's own features (the first columns)."""
    if not items:
        return 0
    names = [n.split(":", 1)[1] for n in items[0]["names"]]
    own = len(names)
    extra = [name for name in DERIVED if name not in names]
    for it in items:
        values = {name: it["x"][:, i] for i, name in enumerate(names)}
        it["x"] = (
            np.concatenate([it["x"], np.stack([DERIVED[n](values) for n in extra], 1)], 1)
            if extra
            else it["x"]
        )
        it["names"] = it["names"] + [f"{GROUP_OF[n]}:{n}" for n in extra]
    return own


def features(d: dict, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Per candidate: the package's features (n, F), starts, lengths, and the feature names (``group:name``)."""
    starts, lengths, scores = candidates(d, k)
    grid = d["grid"]
    n_units, width = grid.shape

    def at(table, s, length):
        ok = (s >= 0) & (length >= 1) & (length <= width) & (s + length <= n_units)
        out = np.full(len(s), np.nan)
        out[ok] = table[s[ok], length[ok] - 1]
        return out

    moved = [(starts + a, lengths - a + b) for _, a, b in MOVES]
    values = candidate_features(
        grid[starts, lengths - 1][None].astype(np.float64),
        scores[starts, lengths - 1][None],
        np.stack([at(grid, s, n) for s, n in moved])[:, None],
        np.stack([at(scores, s, n) for s, n in moved])[:, None],
        starts[None],
        (starts + lengths)[None],
        np.array([n_units]),
        d["flags"][None].astype(np.int64),
        d["profile"][None].astype(np.float64),
        unit_words([d["units"]]),
        np.array([0]),
        query_word_ids([d["query"]]),
        query_edges([d["query"]]),
    )
    names = [f"{GROUP_OF[name]}:{name}" for name in values]
    return np.stack([v[0] for v in values.values()], 1), starts, lengths, names


def build(rows: list[dict], k: int) -> list[dict]:
    out = []
    for d in rows:
        x, starts, lengths, names = features(d, k)
        ranges = [word_range(d, s, s + n) for s, n in zip(starts, lengths)]
        label = (
            np.array([r == d["place"] for r in ranges], np.float64)
            if d["place"]
            else np.zeros(len(ranges))
        )
        f1 = np.zeros(len(ranges))
        if d["place"]:
            p = d["place"]
            for i, (a, b) in enumerate(ranges):
                common = max(0, min(b, p[1]) - max(a, p[0]))
                f1[i] = 2 * common / ((b - a) + (p[1] - p[0])) if common else 0.0
        out.append(
            dict(
                x=x, label=label, f1=f1, names=names, gold=d["gold"], located=d["place"] is not None
            )
        )
    return out


def fit_softmax(items: list[dict], columns: np.ndarray, l2: float) -> tuple[np.ndarray, ...]:
    """Conditional logit (softmax over a row's candidates), L2-regularised, standardised features; LBFGS."""
    import torch

    x_all = np.concatenate([it["x"][:, columns] for it in items])
    mean, std = x_all.mean(0), x_all.std(0) + 1e-6
    used = [it for it in items if it["label"].max() > 0]
    k = max(len(it["label"]) for it in used)
    x = np.zeros((len(used), k, len(columns)))
    y = np.zeros((len(used), k))
    mask = np.zeros((len(used), k), bool)
    for i, it in enumerate(used):
        n = len(it["label"])
        x[i, :n], y[i, :n], mask[i, :n] = (it["x"][:, columns] - mean) / std, it["label"], True
    x, y, mask = torch.tensor(x), torch.tensor(y / y.sum(1, keepdims=True)), torch.tensor(mask)
    w = torch.zeros(len(columns), dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([w], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        logits = (x @ w).masked_fill(~mask, float("-inf"))
        loss = -(y * torch.log_softmax(logits, 1).masked_fill(~mask, 0)).sum(1).mean() + l2 * (
            w @ w
        )
        loss.backward()
        return loss

    optimiser.step(closure)
    return w.detach().numpy(), mean, std


def predict(items, columns, model) -> list[int]:
    w, mean, std = model
    return [int(np.argmax(((it["x"][:, columns] - mean) / std) @ w)) for it in items]


def metrics(items, picks, subset, value=None) -> dict:
    exact, f1, values, golds = [], [], [], []
    for i in subset:
        it, p = items[i], picks[i]
        golds.append(it["gold"])
        values.append(it["x"][0, 1] if value is None else value(it, p))
        if it["located"] and it["gold"] >= STRONG:
            exact.append(it["label"][p])
            f1.append(it["f1"][p])
    return {
        "exact": 100 * np.mean(exact),
        "f1": 100 * np.mean(f1),
        "spearman": 100 * spearmanr(golds, values).statistic,
        "per_row": (np.array(exact), np.array(f1)),
    }


def bootstrap_gain(
    base: dict, new: dict, samples: int = 2000, seed: int = 0
) -> tuple[float, float, float, float]:
    """Paired bootstrap 95% intervals of the exact and word-F1 gains (percentage points)."""
    rng = np.random.default_rng(seed)
    de = new["per_row"][0] - base["per_row"][0]
    df = new["per_row"][1] - base["per_row"][1]
    idx = rng.integers(0, len(de), (samples, len(de)))
    ge, gf = 100 * de[idx].mean(1), 100 * df[idx].mean(1)
    return (*np.percentile(ge, [2.5, 97.5]), *np.percentile(gf, [2.5, 97.5]))


def load_items(cache: str, name: str, k: int) -> list[dict]:
    built = os.path.join(cache, f"{name}-k{k}.features6.pkl")
    if os.path.exists(built):
        with open(built, "rb") as handle:
            return pickle.load(handle)
    source = os.path.join(cache, f"{name}.pkl")
    if not os.path.exists(source):
        return []
    with open(source, "rb") as handle:
        items = build(pickle.load(handle), k)
    with open(built, "wb") as handle:
        pickle.dump(items, handle)
    return items


def even_cv(
    dev: list[dict], train_name: str, columns, l2: float, extra: list[dict], folds: int = 5
) -> tuple:
    """Exact match and word-F1 on strong even rows, the log-loss of the labelled candidate (even rows with one), and
    the Spearman of the chosen span's phrase score and of its cosine (all even rows), each fold predicted by a model
    fitted on the other even folds (+ ``extra``)."""
    even = list(range(0, len(dev), 2))
    hits, f1, loss, chosen = [], [], [], {}
    for fold in range(folds):
        held = even[fold::folds]
        rest = [dev[i] for i in even if i not in set(held)]
        if train_name.startswith("even-strong"):
            rest = [it for it in rest if it["gold"] >= STRONG]
        w, mean, std = fit_softmax(rest + extra, columns, l2)
        for i in held:
            it = dev[i]
            logits = ((it["x"][:, columns] - mean) / std) @ w
            p = int(np.argmax(logits))
            chosen[i] = it["x"][p, :2]
            if it["label"].max() > 0:
                shifted = logits - logits.max()
                loss.append(np.log(np.exp(shifted).sum()) - shifted[np.argmax(it["label"])])
            if it["located"] and it["gold"] >= STRONG:
                hits.append(it["label"][p])
                f1.append(it["f1"][p])
    gold, values = [dev[i]["gold"] for i in even], np.array([chosen[i] for i in even])
    rho = [100 * spearmanr(gold, values[:, column]).statistic for column in (1, 0)]
    return 100 * float(np.mean(hits)), 100 * float(np.mean(f1)), float(np.mean(loss)), *rho


def cosine_units(items, columns, model, picks) -> list[float]:
    """The chosen span's learned score in cosine units: the logit over the phrase score's weight."""
    w, mean, std = model
    phrase = list(columns).index(1)
    scale = w[phrase] / std[phrase]
    return [float(((it["x"][p, columns] - mean) / std) @ w / scale) for it, p in zip(items, picks)]


#: What each part of a ``--train`` set is, for the exported provenance.
TRAIN_DATA = {
    "even": "STS-B-Context dev half, even rows (odd rows held out)",
    "weak": "weak rows: STS-B train pairs, the second sentence put in place of the paraphrase of an even "
    "STS-B-Context row's passage (and of a determiner just before it when the sentence starts with one)",
    "made": "made rows: STS-B train pairs (CC BY-SA 4.0), the second sentence placed verbatim inside context "
    "glued from other STS-B train sentences (research/context.py make_context), labelled with its place",
    "embedded": "embedded rows: STS-B train pairs (CC BY-SA 4.0), the second sentence worked into the middle of a "
    "sentence (a lead-in and a join written for this project, research/rerank/cache.py) among other STS-B train "
    "sentences, labelled with its place",
    "realtext": "realtext: the tune half of research/realtext (the project's own queries over permissively "
    "licensed paragraphs, labelled with the gold span)",
}


def data_of(part: str) -> str:
    """The provenance of one part of a ``--train`` set (``realtextN``: the tune half counted N times)."""
    count = part.removeprefix("realtext")
    if part.startswith("realtext") and count.isdigit():
        return TRAIN_DATA["realtext"] + f", counted {count} times"
    return TRAIN_DATA[part]


def train_set(name: str, sets: dict[str, list[dict]], named: dict[str, list[dict]]) -> list[dict]:
    """A ``--train`` set: one of ``named``, or parts of ``sets`` joined by ``+`` (``realtextN``: counted N times)."""
    if name in named:
        return named[name]
    out: list[dict] = []
    for part in name.split("+"):
        count = part.removeprefix("realtext")
        if part.startswith("realtext") and count.isdigit():
            out += sets["realtext"] * int(count)
        elif part in sets:
            out += sets[part]
        else:
            raise SystemExit(f"unknown --train part {part!r}")
    return out


def export(args, train: list[dict], columns: np.ndarray, names: list[str]) -> None:
    """Write the shipped re-ranker: features (package names), standardisation, weights, provenance."""
    import json
    import sys

    w, mean, std = fit_softmax(train, columns, args.l2[0])
    data = {
        "format": "slice-st re-ranker 1: softmax over a text's candidates of ((features - mean) / scale) @ weights",
        "candidates": args.k,
        "min_query_units": 4,
        "features": [names[i].split(":", 1)[1] for i in columns],
        "mean": [round(float(v), 8) for v in mean],
        "scale": [round(float(v), 8) for v in std],
        "weights": [round(float(v), 8) for v in w],
        "provenance": {
            "model": f"{args.model}, spans 1-20 words, the 'phrase' scorer's top candidates",
            "train": f"{args.train[0]}: {len(train)} rows ({sum(it['label'].max() > 0 for it in train)} with the "
            "paraphrase among the candidates)",
            "data": "; ".join(data_of(part) for part in args.train[0].split("+")),
            "l2": args.l2[0],
            "min_query_units": "shorter queries keep the 'phrase' scorer's choice: 99% of the training queries (dev "
            "and weak rows) have >= 4 words",
            "command": "python research/rerank/cache.py && python research/rerank/study.py "
            + " ".join(sys.argv[1:]),
        },
    }
    os.makedirs(os.path.dirname(args.export) or ".", exist_ok=True)
    with open(args.export, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
        handle.write("\n")
    print("wrote", args.export)


def selected(args, names: list[str], own: int) -> np.ndarray:
    """The columns of ``--features`` (default: the package's ``own`` first ones) ``--with`` / ``--without`` those named
    and without the ``--drop`` groups."""
    wanted = PREVIOUS if args.features == ["previous"] else args.features
    plain = [n.split(":", 1)[1] for n in names]
    chosen = [plain.index(n) for n in wanted] if wanted else list(range(own))
    chosen = [i for i in chosen if plain[i] not in args.without] + [
        plain.index(n) for n in args.more
    ]
    return np.array([i for i in chosen if names[i].split(":")[0] not in args.drop])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache", default="runs/rerank")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--l2", type=float, nargs="+", default=[1e-3])
    parser.add_argument(
        "--train", nargs="+", default=["even"], help="train_sets names (even+weak, ...)"
    )
    parser.add_argument("--ablate", action="store_true")
    parser.add_argument(
        "--drop", nargs="*", default=[], help="feature groups left out of every model"
    )
    parser.add_argument(
        "--features",
        nargs="+",
        help="the features to use (default: the package's; 'previous': the previous set)",
    )
    parser.add_argument(
        "--with", dest="more", nargs="+", default=[], help="features added to --features"
    )
    parser.add_argument("--without", nargs="+", default=[], help="features left out of --features")
    parser.add_argument(
        "--model", default="slice-minilm", help="the model the cache was made with (provenance)"
    )
    parser.add_argument(
        "--export",
        help="fit the first --train set with the first --l2 and write the re-ranker JSON",
    )
    parser.add_argument(
        "--cv",
        action="store_true",
        help="5-fold CV on the even rows (choose settings without odd rows)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(1)
    dev = load_items(args.cache, "dev", args.k)
    weak = load_items(args.cache, "weak", args.k)
    realtext = load_items(
        args.cache, "realtext", args.k
    )  # research/realtext/rerank_cache.py: the tune half
    made = load_items(args.cache, "made", args.k)  # cache.py --made N
    embedded = load_items(args.cache, "embedded", args.k)  # cache.py --embedded N
    own = with_derived(dev)
    for items in (weak, realtext, made, embedded):
        with_derived(items)
    names = dev[0]["names"]
    every = selected(args, names, own)
    even, odd, whole = range(0, len(dev), 2), range(1, len(dev), 2), range(len(dev))
    top = [0] * len(dev)
    parts = (("even", even), ("odd", odd), ("all", whole))
    base = {part: metrics(dev, top, r) for part, r in parts}
    oracle = [int(np.argmax(it["label"])) for it in dev]
    print(
        "k",
        args.k,
        "oracle odd exact",
        round(metrics(dev, oracle, odd)["exact"], 1),
        "features",
        len(names),
    )
    show = lambda m: f"{m['exact']:.1f} / {m['f1']:.1f} / {m['spearman']:.2f}"  # noqa: E731
    print(
        "| model | even: exact / F1 / Spearman | odd (held out) | all | odd gain, 95% bootstrap | Spearman by "
        "chosen phrase / learned (odd, all) |"
    )
    print(f"| phrase | {show(base['even'])} | {show(base['odd'])} | {show(base['all'])} | | |")
    strong_even = [dev[i] for i in even if dev[i]["gold"] >= STRONG]
    train_sets = {
        "even": [dev[i] for i in even],
        "even-strong": strong_even,
        "weak": weak,
        "weak-strong": [it for it in weak if it["gold"] >= STRONG],
        "even+weak": [dev[i] for i in even] + weak,
        "even-strong+weak-strong": strong_even + [it for it in weak if it["gold"] >= STRONG],
        "even+realtext": [dev[i] for i in even] + realtext,
        "even+realtext2": [dev[i] for i in even] + realtext * 2,  # the real-text rows counted twice
        "even+weak+realtext": [dev[i] for i in even] + weak + realtext,
        "even+weak+realtext5": [dev[i] for i in even] + weak + realtext * 5,
        # made of data whose licence allows commercial use (no STS-B-Context row): what a shipped re-ranker fits
        "made": made,
        "made+realtext": made + realtext,
        "made+realtext5": made + realtext * 5,
        "embedded": embedded,
        "embedded+realtext5": embedded + realtext * 5,
        "embedded+made+realtext5": embedded + made + realtext * 5,
    }
    parts_of = {"weak": weak, "made": made, "embedded": embedded, "realtext": realtext}
    if args.export:
        export(args, train_set(args.train[0], parts_of, train_sets), every, names)
        return
    configs = [(t, l2, "all", every) for t in args.train for l2 in args.l2]
    if args.ablate:
        groups = sorted({n.split(":")[0] for n in names})
        for group in groups:
            keep = np.array(
                [i for i in every if names[i].split(":")[0] != group or names[i] == "score:phrase"]
            )
            configs.append((args.train[0], args.l2[0], f"- {group}", keep))
        for group in groups:
            keep = np.array(
                [i for i in every if names[i].split(":")[0] == group or names[i] == "score:phrase"]
            )
            configs.append((args.train[0], args.l2[0], f"only {group}", keep))
    for train_name, l2, label, columns in configs:
        train = train_set(train_name, parts_of, train_sets)
        if not train:
            continue
        if args.cv:
            extra = (
                [it for it in weak if "strong" not in train_name or it["gold"] >= STRONG]
                if "weak" in train_name
                else []
            )
            exact, f1, loss, rho, rho_cos = even_cv(dev, train_name, columns, l2, extra)
            print(
                f"| {train_name} l2={l2:g} {label} | even 5-fold CV: exact {exact:.1f}, word-F1 {f1:.2f}, "
                f"log-loss {loss:.4f}, Spearman of the chosen span's phrase score {rho:.2f} / cosine {rho_cos:.2f} |",
                flush=True,
            )
            continue
        model = fit_softmax(train, columns, l2)
        picks = predict(dev, columns, model)
        res = {part: metrics(dev, picks, r) for part, r in parts}
        ci = bootstrap_gain(base["odd"], res["odd"])
        learned = cosine_units(dev, columns, model, picks)
        chosen = [float(it["x"][p, 1]) for it, p in zip(dev, picks)]

        def rho(values, r):
            return 100 * spearmanr([dev[i]["gold"] for i in r], [values[i] for i in r]).statistic

        print(
            f"| {train_name} l2={l2:g} {label} | {show(res['even'])} | {show(res['odd'])} | {show(res['all'])} | "
            f"exact [{ci[0]:+.1f}, {ci[1]:+.1f}] F1 [{ci[2]:+.1f}, {ci[3]:+.1f}] | "
            f"{rho(chosen, odd):.2f} / {rho(learned, odd):.2f}, {rho(chosen, whole):.2f} / {rho(learned, whole):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
