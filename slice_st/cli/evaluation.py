"""``slice-st table`` (Table 1 of the SLICE paper for your systems) and ``slice-st mteb run`` (mteb.evaluate with the
STSBContext task).

    slice-st table runs/dev/stsb-context-dev.tsv --system default --system bm25 --system glove \\
        --system densephrases --out runs/dev/table --cache runs/dev/cache
"""

from __future__ import annotations

import argparse
import os
import sys

from slice_st.cli.common import dumps_json, int_at_least, positive_int, report

__all__ = ["add_evaluation_commands"]

DEFAULT_SYSTEMS = ("default", "bm25", "glove", "densephrases")
#: slice_st.evaluation.setups.SETUPS (importing it loads torch; tests check they agree)
SETUP_NAMES = ("full", "ngram", "single")
#: Correlations and the Williams test need at least this many pairs.
MIN_PAIRS = 4


def _setups(value: str) -> list[str]:
    """``--setups``: comma-separated setup names, checked while parsing."""
    setups = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in setups if name not in SETUP_NAMES]
    if unknown or not setups:
        raise argparse.ArgumentTypeError(
            f"unknown setup(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(SETUP_NAMES)}"
        )
    return setups


def add_evaluation_commands(commands) -> None:
    """Register ``table`` and ``mteb`` on the ``slice-st`` sub-parsers."""
    table = commands.add_parser(
        "table",
        help="run systems in the three setups; write a Table-1-style markdown table and a bar chart",
        description="Score systems on an STS-B-Context(-style) TSV in the full / per-n-gram / single-pass setups.",
    )
    table.add_argument("data", metavar="DATA", help="STS-B-Context TSV (path or URL)")
    table.add_argument(
        "-s",
        "--system",
        action="append",
        default=None,
        help="system spec, repeatable: default, st:MODEL (or a model id/path), bm25, glove, densephrases[:MODEL] "
        f"(default: {' '.join(DEFAULT_SYSTEMS)})",
    )
    table.add_argument(
        "--setups", type=_setups, default=list(SETUP_NAMES), help="comma-separated setups (default: full,ngram,single)"
    )
    table.add_argument(
        "-o", "--out", default="runs/table", help="output folder for table.md, table.png, metrics.json, predictions.csv"
    )
    table.add_argument("--cache", default=None, help="folder caching each (system, setup) result (default: OUT/cache)")
    at_least_pairs = int_at_least(MIN_PAIRS, " (correlations and the Williams test need 4 pairs)")
    table.add_argument("--limit", type=at_least_pairs, default=None, help="use a seeded sample of N pairs (N >= 4)")
    table.add_argument(
        "--ngram-limit",
        type=at_least_pairs,
        default=None,
        help="run the per-n-gram setup on a seeded sample of N pairs, N >= 4 (it is N·K passes per passage)",
    )
    table.add_argument("--min-span", type=positive_int, default=1)
    table.add_argument("--max-span", type=positive_int, default=20)
    table.add_argument("--unit", choices=("word", "token"), default="word")
    table.add_argument("--batch-size", type=positive_int, default=32)
    table.add_argument("--seed", type=int, default=0)
    table.add_argument("--title", default=None)
    table.add_argument("--missing-paraphrase", choices=("warn", "error", "drop"), default="warn")
    table.set_defaults(handler=_table_command)

    mteb = commands.add_parser(
        "mteb",
        help="run mteb tasks (STSBContext included) through mteb's public evaluate()",
        description="Build the STSBContext task (and any other mteb task named) and evaluate a model with "
        "mteb.evaluate; "
        "results land in mteb's layout, OUTPUT/results/<model>/<revision>/<task>.json.",
    )
    actions = mteb.add_subparsers(dest="mteb_command", required=True)
    run = actions.add_parser("run", help="evaluate a model on mteb tasks", description=mteb.description)
    run.add_argument(
        "-t",
        "--tasks",
        nargs="+",
        default=["STSBContext"],
        metavar="TASK",
        help="mteb task names (default: STSBContext)",
    )
    run.add_argument(
        "-m",
        "--model",
        default="default",
        help="model id or local folder (default: slice-st's default model; base: all-MiniLM-L6-v2)",
    )
    run.add_argument(
        "--model-name", default=None, help="name for mteb's results (default: the Hub id, or local/<folder>)"
    )
    run.add_argument(
        "--revision",
        default=None,
        help="revision for mteb's results (default: the Hub revision, or the weights' fingerprint)",
    )
    run.add_argument(
        "--stsb-context",
        metavar="FILE",
        default=None,
        help="the STS-B-Context TSV (path or URL; or set SLICE_ST_STSB_CONTEXT)",
    )
    run.add_argument(
        "--source",
        choices=("released", "make-context", "unknown"),
        default=None,
        help="what the TSV is (default: the note `make-context` writes beside its output, else unknown)",
    )
    run.add_argument(
        "--limit",
        type=int_at_least(MIN_PAIRS, " (correlations need 4 pairs)"),
        default=None,
        help="STSBContext on a seeded sample of N pairs (N >= 4)",
    )
    run.add_argument("--output-folder", default="results", help="mteb's result cache folder (default: results)")
    run.add_argument(
        "--overwrite-strategy", choices=("always", "never", "only-missing", "only-cache"), default="only-missing"
    )
    run.add_argument("--batch-size", type=positive_int, default=32)
    run.add_argument("--device", default=None)
    run.add_argument("--min-span", type=positive_int, default=1)
    run.add_argument("--max-span", type=positive_int, default=20)
    run.set_defaults(handler=_mteb_command)


def _table_command(args) -> int:
    from slice_st.data import read_stsb_context
    from slice_st.evaluation.baselines import make_system
    from slice_st.evaluation.table import (
        bar_chart,
        localisation_table,
        markdown_table,
        run_table,
        subset_indices,
        system_labels,
        table_metrics,
    )

    if args.min_span > args.max_span:
        raise ValueError(f"--min-span ({args.min_span}) must be <= --max-span ({args.max_span}).")
    data = read_stsb_context(args.data, missing_paraphrase=args.missing_paraphrase)
    if args.limit is not None and args.ngram_limit is not None and args.ngram_limit > args.limit:
        raise ValueError(f"--ngram-limit ({args.ngram_limit}) cannot exceed --limit ({args.limit}).")
    indices = subset_indices(len(data), args.limit, args.seed)
    phrases = [data["line"][i] for i in indices]
    passages = [data["passage"][i] for i in indices]
    gold = [data["goldsim"][i] for i in indices]
    systems = [make_system(spec) for spec in (args.system or list(DEFAULT_SYSTEMS))]
    labels = system_labels(systems)  # loads every model now: a missing one stops here, before any scoring
    cache = args.cache or os.path.join(args.out, "cache")

    def log(message: str) -> None:
        report(args, message, sys.stderr)

    table = run_table(
        systems,
        phrases,
        passages,
        gold,
        setups=args.setups,
        min_span=args.min_span,
        max_span=args.max_span,
        unit=args.unit,
        batch_size=args.batch_size,
        cache_dir=cache,
        ngram_limit=args.ngram_limit,
        seed=args.seed,
        log=log,
        show_progress_bar=False if args.no_progress else None,
    )
    paraphrases = [data["paraphrase"][i] for i in indices]
    metrics = table_metrics(table, passages, paraphrases)
    title = args.title or f"{os.path.basename(str(args.data))}: spans {args.min_span}..{args.max_span} {args.unit}s"
    text = markdown_table(metrics, title=title)
    where = localisation_table(metrics)
    if where:  # single pass: the default span scorer unless a system says otherwise ("default@max-cosine")
        text += (
            "\n**Where the best span lands** (against the paraphrase's place; single pass: the system's span scorer, "
            '"reranked" unless its label names another; per-n-gram: max cosine)\n\n' + where
        )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    systems_info = {
        label: {"key": system.cache_key, "spec": spec}
        for label, system, spec in zip(labels, systems, args.system or list(DEFAULT_SYSTEMS))
    }
    with open(os.path.join(args.out, "metrics.json"), "w", encoding="utf-8") as handle:
        handle.write(
            dumps_json(
                {"data": str(args.data), "pairs": len(indices), "systems": systems_info, "metrics": metrics}, indent=1
            )
            + "\n"
        )
    _write_predictions(os.path.join(args.out, "predictions.csv"), table, phrases, passages)
    bar_chart(metrics, os.path.join(args.out, "table.png"), title=title)
    print(text)
    report(args, f"wrote {args.out}/table.md, table.png, metrics.json, predictions.csv", sys.stderr)
    return 0


def _write_predictions(path: str, table, phrases, passages) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["pair", "setup", "system", "gold", "score", "start", "end", "span", "phrase"])
        for setup, entry in table.items():
            for name, result in entry["results"].items():
                for k, index in enumerate(entry["indices"]):
                    span = result.spans[k] if result.spans else None
                    writer.writerow(
                        [
                            index,
                            setup,
                            name,
                            entry["gold"][k],
                            f"{result.scores[k]:.6f}",
                            *(span if span else ("", "")),
                            passages[index][span[0] : span[1]] if span else "",
                            phrases[index],
                        ]
                    )


def _mteb_command(args) -> int:
    from slice_st.integrations.mteb import run_mteb

    if args.min_span > args.max_span:
        raise ValueError(f"--min-span ({args.min_span}) must be <= --max-span ({args.max_span}).")
    result = run_mteb(
        args.model,
        args.tasks,
        stsb_context=args.stsb_context,
        source=args.source,
        limit=args.limit,
        output_folder=args.output_folder,
        model_name=args.model_name,
        revision=args.revision,
        batch_size=args.batch_size,
        device=args.device,
        overwrite_strategy=args.overwrite_strategy,
        min_span=args.min_span,
        max_span=args.max_span,
        show_progress_bar=not args.no_progress,
    )
    for task in result.task_results:
        for split, scores in task.scores.items():
            for subset in scores:
                print(
                    dumps_json(
                        {
                            "task": task.task_name,
                            "model": result.model_name,
                            "revision": result.model_revision,
                            "split": split,
                            "main_score": subset.get("main_score"),
                            "scores": subset,
                        }
                    )
                )
    report(
        args,
        f"results in {args.output_folder}/results/{result.model_name.replace('/', '__')}/{result.model_revision}/",
        sys.stderr,
    )
    return 0
