"""``slice-st table`` (Table 1 of the SLICE paper for your systems) and ``slice-st mteb`` (mteb's CLI with the STSBContext task).

    slice-st table runs/dev/stsb-context-dev.tsv --system default --system bm25 --system glove \\
        --system densephrases --out runs/dev/table --cache runs/dev/cache
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from slice_st.cli.common import positive_int

__all__ = ["add_evaluation_commands"]

DEFAULT_SYSTEMS = ("default", "bm25", "glove", "densephrases")


def add_evaluation_commands(commands) -> None:
    """Register ``table`` and ``mteb`` on the ``slice-st`` sub-parsers."""
    table = commands.add_parser(
        "table", help="run systems in the three setups; write a Table-1-style markdown table and a bar chart",
        description="Score systems on an STS-B-Context(-style) TSV in the full / per-n-gram / single-pass setups.")
    table.add_argument("data", metavar="DATA", help="STS-B-Context TSV (path or URL)")
    table.add_argument("-s", "--system", action="append", default=None,
                       help="system spec, repeatable: default, st:MODEL (or a model id/path), bm25, glove, densephrases[:MODEL] "
                            f"(default: {' '.join(DEFAULT_SYSTEMS)})")
    table.add_argument("--setups", default=None, help="comma-separated setups (default: full,ngram,single)")
    table.add_argument("-o", "--out", default="runs/table", help="output folder for table.md, table.png, metrics.json, predictions.csv")
    table.add_argument("--cache", default=None, help="folder caching each (system, setup) result (default: OUT/cache)")
    table.add_argument("--limit", type=positive_int, default=None, help="use a seeded sample of N pairs")
    table.add_argument("--ngram-limit", type=positive_int, default=None,
                       help="run the per-n-gram setup on a seeded sample of N pairs (it is N·K passes per passage)")
    table.add_argument("--min-span", type=positive_int, default=1)
    table.add_argument("--max-span", type=positive_int, default=20)
    table.add_argument("--unit", choices=("word", "token"), default="word")
    table.add_argument("--batch-size", type=positive_int, default=32)
    table.add_argument("--seed", type=int, default=0)
    table.add_argument("--title", default=None)
    table.add_argument("--missing-paraphrase", choices=("warn", "error", "drop"), default="warn")
    table.set_defaults(handler=_table_command)

    mteb = commands.add_parser(
        "mteb", help="mteb's own CLI with the STSBContext task registered and local model paths accepted",
        description="Registers the STSBContext task, then hands over to mteb's CLI (e.g. `slice-st mteb run -t STSBContext "
                    "-m MODEL --stsb-context FILE`). Local model folders are loaded with sentence-transformers.",
        add_help=False)
    mteb.add_argument("-h", "--help", action="store_true", dest="mteb_help", help="show this help and mteb's")
    mteb.add_argument("mteb_args", nargs=argparse.REMAINDER, help="arguments for mteb (see `slice-st mteb --help`)")
    mteb.set_defaults(handler=_mteb_command)


def _table_command(args) -> int:
    from slice_st.data import read_stsb_context
    from slice_st.evaluation.setups import SETUPS
    from slice_st.evaluation.table import bar_chart, markdown_table, run_table, subset_indices, table_metrics

    data = read_stsb_context(args.data, missing_paraphrase=args.missing_paraphrase)
    indices = subset_indices(len(data), args.limit, args.seed)
    phrases = [data["line"][i] for i in indices]
    passages = [data["passage"][i] for i in indices]
    gold = [data["goldsim"][i] for i in indices]
    setups = [s.strip() for s in (args.setups or ",".join(SETUPS)).split(",") if s.strip()]
    systems = args.system or list(DEFAULT_SYSTEMS)
    cache = args.cache or os.path.join(args.out, "cache")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    table = run_table(systems, phrases, passages, gold, setups=setups, min_span=args.min_span, max_span=args.max_span,
                      unit=args.unit, batch_size=args.batch_size, cache_dir=cache, ngram_limit=args.ngram_limit, seed=args.seed, log=log)
    metrics = table_metrics(table)
    title = args.title or f"{os.path.basename(str(args.data))}: spans {args.min_span}..{args.max_span} {args.unit}s"
    text = markdown_table(metrics, title=title)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    with open(os.path.join(args.out, "metrics.json"), "w", encoding="utf-8") as handle:
        json.dump({"data": str(args.data), "pairs": len(indices), "metrics": metrics}, handle, indent=1, default=float)
    _write_predictions(os.path.join(args.out, "predictions.csv"), table, phrases, passages)
    bar_chart(metrics, os.path.join(args.out, "table.png"), title=title)
    print(text)
    print(f"wrote {args.out}/table.md, table.png, metrics.json, predictions.csv")
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
                    writer.writerow([index, setup, name, entry["gold"][k], f"{result.scores[k]:.6f}",
                                     *(span if span else ("", "")), passages[index][span[0] : span[1]] if span else "", phrases[index]])


def _mteb_command(args) -> int:
    from slice_st.integrations.mteb import run_mteb_cli

    return run_mteb_cli((["--help"] if args.mteb_help else []) + list(args.mteb_args))
