"""``slice-st mteb run``: mteb.evaluate with the STSBContext task (and any other mteb task named)."""

from __future__ import annotations

import sys

from slice_st.cli.common import add_command, dumps_json, pick, report


def add_commands(commands) -> None:
    mteb = add_command(
        commands, "mteb", "run mteb tasks (STSBContext included) through mteb's evaluate()"
    )
    actions = mteb.add_subparsers(dest="mteb_command", required=True, metavar="COMMAND")
    options = ("--model", "--batch-size", "--device", "--min-span", "--max-span")
    about = "evaluate a model on mteb tasks (STSBContext and any other)"
    run = add_command(
        actions, "run", about, _run, *options, model="default", min_span=1, max_span=20
    )
    run.description = "Evaluate a model with mteb.evaluate; results in OUTPUT/results/<model>/<revision>/<task>.json."
    run.add_argument(
        "-t", "--tasks", nargs="+", default=["STSBContext"], metavar="TASK", help="mteb task names"
    )
    run.add_argument(
        "--model-name", help="name for mteb's results (default: the Hub id, or local/<folder>)"
    )
    run.add_argument(
        "--revision",
        help="revision for mteb's results (default: the Hub's, or the weights' fingerprint)",
    )
    run.add_argument(
        "--stsb-context",
        metavar="FILE",
        help="the STS-B-Context TSV (or set SLICE_ST_STSB_CONTEXT)",
    )
    run.add_argument(
        "--source", choices=("released", "make-context", "unknown"), help="what the TSV is"
    )
    run.add_argument("--limit", type=int, help="STSBContext on a seeded sample of N pairs (N >= 4)")
    run.add_argument(
        "--output-folder", default="results", help="mteb's result cache folder (default: results)"
    )
    strategies = ("always", "never", "only-missing", "only-cache")
    run.add_argument("--overwrite-strategy", choices=strategies, default="only-missing")


def _run(args) -> int:
    from slice_st.integrations.mteb import run_mteb

    options = pick(args, "stsb_context", "source", "limit", "output_folder", "model_name")
    options |= pick(args, "revision", "batch_size", "device", "overwrite_strategy")
    options |= pick(args, "min_span", "max_span")
    result = run_mteb(args.model, args.tasks, **options, show_progress_bar=not args.no_progress)
    for task in result.task_results:
        record = {
            "task": task.task_name,
            "model": result.model_name,
            "revision": result.model_revision,
        }
        for split, scores in task.scores.items():
            for subset in scores:
                fields = {"split": split, "main_score": subset.get("main_score"), "scores": subset}
                print(dumps_json(record | fields))
    where = f"{args.output_folder}/results/{result.model_name.replace('/', '__')}/{result.model_revision}/"
    report(args, f"results in {where}", sys.stderr)
    return 0
