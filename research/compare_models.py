"""Two models side by side on an STS-B-Context file, with 95% paired bootstrap intervals of the second minus the first:
single-pass Spearman (×100) and localisation on strong rows (exact match and word-F1 of the chosen span, ×100), on the
odd rows (held out from tuning), the even rows and all rows.

    python -m research.compare_models DEV.tsv --models runs/old-slice-minilm slice-minilm \
        --scorers reranked:old-minilm-rerank reranked

A model is a name or folder for ``slice_st.load_model``; a scorer is a name or ``reranked:FILE`` (the re-ranker
``slice_st/pretrained/rerank/FILE.json``), one for both or one each (default: ``reranked``, each shipped model with
its own re-ranker). The rows are resampled together (2,000 samples, seed 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import numpy as np
from scipy.stats import spearmanr

PARTS = {"odd": slice(1, None, 2), "even": slice(0, None, 2), "all": slice(None)}


def row_results(model, data, scorer) -> dict[str, np.ndarray]:
    """Per row: the single-pass score, and exact / word-F1 of the chosen span (``nan`` where not a strong located
    row)."""
    from slice_st.evaluation.localisation import STRONG_GOLD, span_localisation
    from slice_st.evaluation.span_retrieval import score_single

    phrases, passages = list(data["line"]), list(data["passage"])
    result = score_single(model, phrases, passages, max_span=20, scorer=scorer)
    exact, f1 = np.full(len(passages), np.nan), np.full(len(passages), np.nan)
    for row, (passage, span, paraphrase, gold) in enumerate(
        zip(passages, result.spans, data["paraphrase"], data["goldsim"])
    ):
        found = span_localisation([passage], [span], [paraphrase], [gold])
        if float(gold) >= STRONG_GOLD and found["strong_located"]:
            exact[row], f1[row] = found["strong_exact"], found["strong_word_f1"]
    return {"score": np.asarray(result.scores, dtype=np.float64), "exact": exact, "f1": f1}


def figures(rows: dict[str, np.ndarray], gold: np.ndarray, index: np.ndarray) -> dict[str, float]:
    """Spearman, exact and word-F1 (×100) over the rows ``index`` (a bootstrap sample may repeat rows)."""
    kept = index[~np.isnan(rows["exact"][index])]
    return {
        "spearman": 100 * float(spearmanr(gold[index], rows["score"][index]).statistic),
        "exact": float(np.mean(rows["exact"][kept])),
        "f1": float(np.mean(rows["f1"][kept])),
    }


def compare(
    first: dict, second: dict, gold: np.ndarray, samples: int = 2000, seed: int = 0
) -> dict:
    """Per part: both models' figures and the 95% interval of the second minus the first."""
    rng = np.random.default_rng(seed)
    report = {}
    for part, rows in PARTS.items():
        index = np.arange(len(gold))[rows]
        a, b = figures(first, gold, index), figures(second, gold, index)
        draws = [rng.choice(index, len(index)) for _ in range(samples)]
        gains = {key: [] for key in a}
        for draw in draws:
            fa, fb = figures(first, gold, draw), figures(second, gold, draw)
            for key in gains:
                gains[key].append(fb[key] - fa[key])
        report[part] = {
            key: {
                "first": round(a[key], 2),
                "second": round(b[key], 2),
                "gain_95ci": _interval(gains[key]),
            }
            for key in a
        }
    return report


def _interval(values: list[float]) -> list[float]:
    return [round(float(v), 2) for v in np.percentile(values, [2.5, 97.5])]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dev", help="an STS-B-Context TSV with the paraphrase column")
    parser.add_argument("--models", nargs=2, required=True, metavar=("FIRST", "SECOND"))
    parser.add_argument(
        "--scorers",
        nargs="+",
        default=["reranked"],
        help="one scorer for both models or one each (a name, or reranked:FILE: slice_st/pretrained/rerank/FILE.json)",
    )
    args = parser.parse_args(argv)
    import slice_st
    from slice_st.data.stsb import read_stsb_context

    data = read_stsb_context(args.dev)
    gold = np.asarray(data["goldsim"], dtype=np.float64)
    from research.realtext.evaluate import as_scorer

    scorers = args.scorers * 2 if len(args.scorers) == 1 else args.scorers
    rows = [
        row_results(slice_st.load_model(name), data, as_scorer(s))
        for name, s in zip(args.models, scorers)
    ]
    report = {"models": args.models, "scorers": scorers, **compare(*rows, gold)}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
