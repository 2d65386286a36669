"""``slice-st train``: SLICE training (:func:`slice_st.training.train`) from the command line.

``slice-st train --help`` lists the options a user sets first; the rest are in titled groups (spans, schedule
and checkpoints, distillation, data, Hub).
"""

from __future__ import annotations

import argparse

from slice_st.training import trainer
from slice_st.training.trainer import (
    DEV_SELECTIONS,
    DISTILL_LOSSES,
    HUB_STRATEGIES,
    MIXES,
    PRESETS,
    TrainConfig,
    config_from_args,
)


def _numbers(group, defaults: TrainConfig, names: tuple[str, ...]) -> None:
    """One ``--name`` option per numeric :class:`TrainConfig` field, its default shown in the help."""
    for name in names:
        value = getattr(defaults, name)
        kind = float if isinstance(value, float) or name == "lora_alpha" else int
        group.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None, help=f"default: {value}")


def add_train_command(commands) -> None:
    """Register ``slice-st train`` on the CLI's subparsers."""
    parser = commands.add_parser(
        "train",
        description=trainer.__doc__.split("\n\n")[0],
        help="train a SLICE model (SpanMaxCrossEntropyLoss and/or SpanDistillationLoss)",
    )
    defaults = TrainConfig(output_dir="")
    parser.add_argument("-o", "--output-dir", required=True)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="documented settings; explicit options override them")
    parser.add_argument("-m", "--model", help="base model id or path (default: embedded all-MiniLM-L6-v2)")
    parser.add_argument(
        "--train-data",
        action="append",
        help="SLICE triplets: msmarco:PATH | offline[:DATA_DIR] | a saved datasets folder (repeatable)",
    )
    parser.add_argument(
        "--distill-data",
        action="append",
        help="unlabeled text for span self-distillation: offline[:DATA_DIR] | text/TSV/JSONL files | "
        "a saved passages folder (repeatable)",
    )
    parser.add_argument(
        "--dev", dest="dev_path", help="STS-B-Context TSV for the evaluator (e.g. from slice-st make-context)"
    )
    parser.add_argument(
        "--sts-dev",
        dest="sts_dev_path",
        help="STS-B TSV: also report sentence similarity (Spearman) at each evaluation",
    )
    _numbers(parser, defaults, ("max_steps", "batch_size", "learning_rate", "lora_r", "seed"))
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="train into an --output-dir that already has files (its checkpoints and final/ may be replaced)",
    )
    parser.add_argument(
        "--push-to-hub",
        metavar="ORG/NAME",
        help="push to this Hub repository with the trainer (checked before training: token, HF_HUB_OFFLINE, write "
        "access)",
    )

    spans = parser.add_argument_group("spans (advanced)")
    _numbers(spans, defaults, ("min_span", "max_span", "eval_max_span", "scale"))
    spans.add_argument("--unit", choices=("word", "token"), default=None)
    spans.add_argument("--in-batch-negatives", action="store_true", default=None)

    schedule = parser.add_argument_group("schedule and checkpoints (advanced)")
    _numbers(
        schedule,
        defaults,
        (
            "warmup_ratio",
            "eval_steps",
            "save_steps",
            "save_total_limit",
            "logging_steps",
            "max_seq_length",
            "lora_alpha",
        ),
    )
    schedule.add_argument(
        "--dev-select",
        choices=DEV_SELECTIONS,
        default=None,
        help="dev rows that choose the best checkpoint (default: all; 'even' keeps the odd rows unseen)",
    )

    distill = parser.add_argument_group("distillation (advanced)")
    distill.add_argument("--teacher", help="distillation teacher id or path (default: a frozen copy of the base model)")
    distill.add_argument("--distill-metric", choices=("cosine", "mse"), default=None)
    distill.add_argument(
        "--cache-teacher", action="store_true", default=None, help="precompute the teacher's span vectors once"
    )
    _numbers(distill, defaults, ("distill_weight", "distill_spans", "distill_max_span", "distill_text_weight"))
    distill.add_argument(
        "--distill-loss",
        choices=DISTILL_LOSSES,
        default=None,
        help="vector: match the teacher's span vectors (same size; default)",
    )

    data = parser.add_argument_group("data (advanced)")
    data.add_argument("--shared-data", help="data folder for --train-data/--distill-data offline (or give offline:DIR)")
    data.add_argument(
        "--mix", choices=MIXES, default=None, help="how batches of the two datasets alternate (default: round_robin)"
    )
    _numbers(data, defaults, ("train_limit", "dev_limit", "distill_limit", "passage_min_words", "passage_max_words"))

    hub = parser.add_argument_group("Hub and model card (advanced)")
    hub.add_argument(
        "--hub-strategy",
        choices=HUB_STRATEGIES,
        default=None,
        help="when the trainer pushes (TrainingArguments.hub_strategy; default: every_save)",
    )
    hub.add_argument("--hub-private-repo", action="store_true", default=None, help="create the Hub repository private")
    hub.add_argument(
        "--license",
        default=None,
        help="the model card's licence (default: chosen from the training data, e.g. cc-by-nc-sa-4.0 "
        "for SICK or MS MARCO)",
    )
    parser.set_defaults(handler=_train_command)


def _train_command(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    trainer.check_train_output(
        config.output_dir, resume=config.resume, overwrite=args.overwrite
    )  # before loading anything
    trainer.train(config, overwrite=args.overwrite)
    return 0
