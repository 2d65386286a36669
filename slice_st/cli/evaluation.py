"""``slice-st mteb run``: mteb.evaluate with the STSBContext task (and any other mteb task named)."""

from __future__ import annotations

import sys

from slice_st.cli.common import dumps_json, int_at_least, positive_int, report

#: Correlations need at least this many pairs.
MIN_PAIRS = 4


def add_evaluation_commands(commands) -> None:
    """Register ``mteb`` on the ``slice-st`` sub-parsers."""
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
