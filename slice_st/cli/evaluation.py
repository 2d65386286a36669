"""``slice-st mteb run``: mteb.evaluate with the STSBContext task (and any other mteb task named).

slice-st mteb run --stsb-context runs/dev/stsb-context-dev.tsv --model base
"""

from __future__ import annotations

import sys

from slice_st.cli.common import UsageError, dumps_json, int_at_least, positive_int, report


def add_mteb_command(commands) -> None:
    mteb = commands.add_parser(
        "mteb",
        help="run mteb tasks (STSBContext included) through mteb's public evaluate()",
        description="Build the STSBContext task (and any other mteb task named) and evaluate a model with "
        "mteb.evaluate; results land in mteb's layout, OUTPUT/results/<model>/<revision>/<task>.json.",
    )
    actions = mteb.add_subparsers(dest="mteb_command", required=True)
    run = actions.add_parser("run", help="evaluate a model on mteb tasks", description=mteb.description)
    run.add_argument("-t", "--tasks", nargs="+", default=["STSBContext"], metavar="TASK", help="mteb task names")
    run.add_argument("-m", "--model", default="default", help="model id or folder (default: slice-st's; base: MiniLM)")
    run.add_argument("--model-name", help="name for mteb's results (default: the Hub id, or local/<folder>)")
    run.add_argument("--revision", help="revision for mteb's results (default: the Hub's, or the weights' fingerprint)")
    run.add_argument("--stsb-context", metavar="FILE", help="the STS-B-Context TSV (or set SLICE_ST_STSB_CONTEXT)")
    run.add_argument(
        "--source",
        choices=("released", "make-context", "unknown"),
        help="what the TSV is (default: the note `make-context` writes beside its output, else unknown)",
    )
    run.add_argument("--limit", type=int_at_least(4), help="STSBContext on a seeded sample of N pairs (N >= 4)")
    run.add_argument("--output-folder", default="results", help="mteb's result cache folder (default: results)")
    run.add_argument(
        "--overwrite-strategy", choices=("always", "never", "only-missing", "only-cache"), default="only-missing"
    )
    run.add_argument("--batch-size", type=positive_int, default=32)
    run.add_argument("--device")
    run.add_argument("--min-span", type=positive_int, default=1)
    run.add_argument("--max-span", type=positive_int, default=20)
    run.set_defaults(handler=_mteb_command)


def _mteb_command(args) -> int:
    from slice_st.integrations.mteb import run_mteb

    if args.min_span > args.max_span:
        raise UsageError(f"--min-span ({args.min_span}) must be <= --max-span ({args.max_span}).")
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
                record = {"task": task.task_name, "model": result.model_name, "revision": result.model_revision}
                print(dumps_json({**record, "split": split, "main_score": subset.get("main_score"), "scores": subset}))
    where = f"{args.output_folder}/results/{result.model_name.replace('/', '__')}/{result.model_revision}/"
    report(args, f"results in {where}", sys.stderr)
    return 0
