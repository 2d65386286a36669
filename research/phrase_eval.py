"""PEARL's phrase tasks and Nugget's ParaBank paraphrase identification for a model.

python -m research.phrase_eval --task all --data DATA
python -m research.phrase_eval -t bird -t turney --data DATA/pearl_eval --format json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

from research._cli import positive_int, run

__all__ = ["TASKS", "build_parser", "main", "run_phrase_eval", "format_table"]

TASKS = ("bird", "turney", "ppdb", "ppdb-filtered", "conll03", "parabank-pi")
#: Primary metric of each task (×100 in the table).
TASK_METRICS = {
    "bird": "pearson",
    "turney": "accuracy",
    "ppdb": "accuracy",
    "ppdb-filtered": "accuracy",
    "conll03": "nmi",
    "parabank-pi": "mrr",
}


def _int_list(value: str) -> list[int]:
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {value!r}"
        ) from None


def _float_list(value: str) -> list[float]:
    try:
        return [float(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {value!r}"
        ) from None


def _word_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m research.phrase_eval",
        description="Score a model on PEARL's phrase tasks (BIRD, Turney, PPDB, PPDB-filtered, CoNLL-03 entity "
        "clustering) "
        "and Nugget's ParaBank paraphrase identification. Tables show metrics x100; JSON keeps them on the 0-1 scale.",
    )
    parser.add_argument(
        "-t",
        "--task",
        action="append",
        required=True,
        choices=(*TASKS, "all"),
        help="task to run (repeatable; 'all' runs every task)",
    )
    parser.add_argument(
        "-d",
        "--data",
        action="append",
        required=True,
        metavar="DIR",
        help="folder holding the task data (PEARL's pearl_eval/, Nugget's nugget_pi/, or their parent); repeatable",
    )
    parser.add_argument(
        "-m",
        "--model",
        default=None,
        help="model id or path (default: the shipped slice-minilm; 'base' for plain all-MiniLM-L6-v2)",
    )
    parser.add_argument("-f", "--format", choices=("text", "json", "jsonl"), default="text")
    parser.add_argument(
        "--encoding",
        choices=("span", "sentence", "both"),
        default="both",
        help="phrase vectors: span (mean of non-special token vectors, as slice-st queries), sentence "
        "(model.encode) or both (default)",
    )
    parser.add_argument(
        "--seeds", type=_int_list, default=[0, 1, 2], help="PPDB probe seeds (default 0,1,2)"
    )
    parser.add_argument(
        "--split", default="dev", help="ParaBank split (default dev, as Nugget reports)"
    )
    parser.add_argument(
        "--methods",
        type=_word_list,
        default=None,
        help="ParaBank methods: document,mean,tokens,spans,selected (default: all)",
    )
    parser.add_argument(
        "--rules",
        type=_word_list,
        default=["tile", "central"],
        help="span selection rules (default tile,central)",
    )
    parser.add_argument(
        "--ratios",
        type=_float_list,
        default=[0.05, 0.1, 0.25],
        help="vectors kept per document, as a fraction of its tokens (default 0.05,0.1,0.25)",
    )
    parser.add_argument(
        "--min-span",
        type=positive_int,
        default=1,
        help="ParaBank: shortest span in words (default 1)",
    )
    parser.add_argument(
        "--max-span",
        type=positive_int,
        default=10,
        help="ParaBank: longest span in words (default 10)",
    )
    parser.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        help="use the first N items of each task (quick runs)",
    )
    parser.add_argument(
        "--cache",
        default=None,
        metavar="DIR",
        help="ParaBank: keep the documents' token vectors here",
    )
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda:0")
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    return parser


def _evaluator(task: str, path: str, args, cache_key: str | None = None) -> tuple[Any, int]:
    """The evaluator of ``task`` on ``path`` and its number of items (``cache_key``: the model's, for ``--cache``)."""
    from research import phrase_data
    from research.phrase_tasks import (
        BirdEvaluator,
        EntityClusteringEvaluator,
        PairClassificationEvaluator,
        TurneyEvaluator,
    )

    limit = args.limit
    encodings = ("span", "sentence") if args.encoding == "both" else (args.encoding,)
    common = {
        "encodings": encodings,
        "batch_size": args.batch_size,
        "show_progress_bar": args.progress,
    }
    if task == "bird":
        data = phrase_data.read_bird(path)
        return BirdEvaluator(
            data.phrase1[:limit], data.phrase2[:limit], data.labels[:limit], **common
        ), len(data.labels[:limit])
    if task == "turney":
        data = phrase_data.read_turney(path)
        return TurneyEvaluator(data.queries[:limit], data.candidates[:limit], **common), len(
            data.queries[:limit]
        )
    if task in ("ppdb", "ppdb-filtered"):
        data = phrase_data.read_ppdb(path)
        evaluator = PairClassificationEvaluator(
            data.phrase1[:limit],
            data.phrase2[:limit],
            data.labels[:limit],
            seeds=args.seeds,
            **common,
        )
        return evaluator, len(data.labels[:limit])
    if task == "conll03":
        data = phrase_data.read_conll_entities(path)
        return EntityClusteringEvaluator(data.phrases[:limit], data.labels[:limit], **common), len(
            data.phrases[:limit]
        )
    from research.document_similarity import ParaphraseIdentificationEvaluator

    tasks = phrase_data.read_parabank_pi(path)
    methods = args.methods or ("document", "mean", "tokens", "spans", "selected")
    evaluator = ParaphraseIdentificationEvaluator.from_tasks(
        tasks,
        limit=limit,
        methods=methods,
        rules=args.rules,
        ratios=args.ratios,
        min_span=args.min_span,
        max_span=args.max_span,
        batch_size=args.batch_size,
        cache_dir=args.cache,
        cache_key=cache_key,
        show_progress_bar=args.progress,
    )
    return evaluator, len(evaluator.sources)


def run_phrase_eval(model, tasks: list[str], roots: list[str], args) -> list[dict[str, Any]]:
    """Run each task; one result object per task: ``task``, ``data``, ``n``, ``metric``, ``results`` (variant →
    metrics), ``seconds``."""
    from research.phrase_data import find_task_data

    paths = {
        task: find_task_data(task, roots, split=args.split) for task in tasks
    }  # every path checked before any work
    cache_key = None
    if getattr(args, "cache", None) and "parabank-pi" in tasks:
        from slice_st.loading import model_fingerprint

        cache_key = model_fingerprint(model)
    results = []
    for task in tasks:
        start = time.perf_counter()
        evaluator, count = _evaluator(task, paths[task], args, cache_key)
        metrics = evaluator(model)
        grouped: dict[str, dict[str, float | None]] = {}
        for key, value in metrics.items():
            variant, metric = key.rsplit("_", 1) if task == "parabank-pi" else key.split("_", 1)
            grouped.setdefault(variant, {})[metric] = (
                None if value is None or not math.isfinite(value) else float(value)
            )
        results.append(
            {
                "task": task,
                "data": paths[task],
                "n": count,
                "metric": TASK_METRICS[task],
                "results": grouped,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
    return results


def format_table(results: list[dict[str, Any]]) -> str:
    """A plain-text table: one row per task and variant, metrics ×100.

    >>> print(format_table([{"task": "bird", "n": 3, "metric": "pearson", "seconds": 1.0,
    ...                      "results": {"span": {"pearson": 0.61, "spearman": None}}}]))
    task           variant        metric      x100  other                n  seconds
    bird           span           pearson    61.00  spearman -           3      1.0
    """
    lines = [
        f"{'task':<14} {'variant':<14} {'metric':<8} {'x100':>7}  {'other':<16} {'n':>5}  {'seconds':>7}"
    ]
    for result in results:
        for variant, metrics in result["results"].items():
            value = metrics.get(result["metric"])
            shown = "-" if value is None else f"{100 * value:.2f}"
            extras = []
            for key, extra in metrics.items():
                if key == result["metric"]:
                    continue
                if key == "vectors":
                    extras.append(f"vectors {extra:.1f}" if extra is not None else "vectors -")
                elif key.endswith("_std"):
                    extras.append(f"± {100 * extra:.2f}" if extra is not None else "± -")
                else:
                    extras.append(f"{key} {100 * extra:.2f}" if extra is not None else f"{key} -")
            lines.append(
                f"{result['task']:<14} {variant:<14} {result['metric']:<8} {shown:>7}  {', '.join(extras):<16} "
                f"{result['n']:>5}  {result['seconds']:>7.1f}"
            )
    return "\n".join(lines)


def _phrase_eval_command(args) -> int:
    import slice_st

    tasks = list(TASKS) if "all" in args.task else list(dict.fromkeys(args.task))
    for root in args.data:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"--data folder not found: {root}")
    if not args.seeds:
        raise ValueError("--seeds needs at least one integer.")
    model = slice_st.load_model(args.model, device=args.device)
    results = run_phrase_eval(model, tasks, args.data, args)
    if args.format == "json":
        sys.stdout.write(json.dumps(results, indent=2, allow_nan=False) + "\n")
    elif args.format == "jsonl":
        sys.stdout.writelines(json.dumps(result, allow_nan=False) + "\n" for result in results)
    else:
        sys.stdout.write(format_table(results) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _phrase_eval_command, argv)


if __name__ == "__main__":
    sys.exit(main())
