"""``slice-st train``: SLICE training (:func:`slice_st.training.train`) from the command line."""

from __future__ import annotations

import argparse

from slice_st.training import trainer
from slice_st.training.trainer import PRESETS, TrainConfig, config_from_args

__all__ = ["add_train_command"]


def add_train_command(commands) -> None:
    """Register ``slice-st train`` on the CLI's subparsers."""
    parser = commands.add_parser("train", help="train a SLICE model (SpanMaxCrossEntropyLoss and/or SpanDistillationLoss)", description=trainer.__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output-dir", required=True)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="documented settings; explicit options override them")
    parser.add_argument("-m", "--model", help="base model id or path (default: embedded all-MiniLM-L6-v2)")
    parser.add_argument("--train-data", action="append", help="msmarco:PATH | offline[:SHARED_DATA_DIR] | a saved datasets folder (repeatable)")
    parser.add_argument("--distill-data", action="append",
                        help="unlabeled text for span self-distillation: offline[:SHARED_DATA_DIR] | text/TSV/JSONL files | a saved passages folder (repeatable)")
    parser.add_argument("--dev", dest="dev_path", help="STS-B-Context TSV for the evaluator (e.g. from slice-st make-context)")
    parser.add_argument("--sts-dev", dest="sts_dev_path", help="STS-B TSV: also report sentence similarity (Spearman) at each evaluation")
    parser.add_argument("--teacher", help="distillation teacher model id or path (default: a frozen copy of the base model)")
    parser.add_argument("--distill-loss", choices=("vector", "score"), default=None,
                        help="vector: match the teacher's span vectors (same size); score: match its span similarities "
                             "(SpanScoreDistillationLoss; any teacher, e.g. all-mpnet-base-v2). Default: vector")
    parser.add_argument("--distill-metric", choices=("cosine", "mse"), default=None)
    parser.add_argument("--cache-teacher", action="store_true", default=None, help="precompute the teacher's span vectors once")
    parser.add_argument("--sts-data", action="append",
                        help="graded pairs in context for SpanMaxCoSENTLoss: offline[:SHARED_DATA_DIR] | JSONL/saved dataset with query, passage, score (repeatable)")
    parser.add_argument("--dev-select", choices=("all", "even", "odd"), default=None,
                        help="dev rows that choose the best checkpoint (default: all; 'even' keeps the odd rows unseen)")
    parser.add_argument("--mix", choices=("round_robin", "proportional"), default=None, help="how batches of the two datasets alternate (default: round_robin)")
    defaults = TrainConfig(output_dir="")
    for name in ("max_steps", "batch_size", "learning_rate", "warmup_ratio", "min_span", "max_span", "eval_max_span", "scale",
                 "eval_steps", "save_steps", "save_total_limit", "logging_steps", "train_limit", "dev_limit", "max_seq_length", "seed",
                 "distill_weight", "distill_spans", "distill_max_span", "distill_text_weight", "distill_phrase_weight",
                 "distill_vector_weight", "passage_min_words", "passage_max_words", "distill_limit", "sts_weight", "sts_scale", "sts_limit", "lora_r", "lora_alpha"):
        value = getattr(defaults, name)
        kind = float if isinstance(value, float) or name == "lora_alpha" else int
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None, help=f"default: {value}")
    parser.add_argument("--unit", choices=("word", "token"), default=None)
    parser.add_argument("--in-batch-negatives", action="store_true", default=None)
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    parser.add_argument("--overwrite", action="store_true",
                        help="train into an --output-dir that already has files (its checkpoints and final/ may be replaced)")
    parser.add_argument("--push-to-hub", metavar="ORG/NAME",
                        help="push to this Hub repository with the trainer (checked before training: token, HF_HUB_OFFLINE, write access)")
    parser.add_argument("--hub-strategy", choices=("end", "every_save", "checkpoint", "all_checkpoints"), default=None,
                        help="when the trainer pushes (TrainingArguments.hub_strategy; default: every_save)")
    parser.add_argument("--hub-private-repo", action="store_true", default=None, help="create the Hub repository private")
    parser.add_argument("--license", default=None,
                        help="the model card's licence (default: chosen from the training data, e.g. cc-by-nc-sa-4.0 for SICK or MS MARCO)")
    parser.add_argument("--shared-data", help="folder of the shared data sets (for --train-data offline)")
    parser.set_defaults(handler=_train_command)

    ship = commands.add_parser("ship-adapter", help="put a LoRA run's adapter into the package as the shipped model (make model)",
                               description="Copy RUN/adapter into DEST with a provenance.json (recipe, data licences, commit, dev figures).")
    ship.add_argument("run_dir", metavar="RUN", help="output folder of slice-st train --lora-r ...")
    ship.add_argument("-o", "--output", required=True,
                      help="destination folder, new or empty (the package's own is slice_st/pretrained/slice_minilm, as make model does)")
    ship.add_argument("--overwrite", action="store_true",
                      help="ship into a folder that has files: replace only adapter_config.json, adapter_model.safetensors and provenance.json")
    ship.add_argument("--dev", dest="dev_path", help="STS-B-Context TSV: score the base and the adapted model on it for the provenance")
    ship.add_argument("--sts-dev", dest="sts_dev_path", help="STS-B TSV: also record sentence similarity of the base and the adapted model")
    ship.set_defaults(handler=_ship_command)


def _train_command(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    trainer.check_train_output(config.output_dir, resume=config.resume, overwrite=args.overwrite)  # before loading anything
    trainer.train(config, overwrite=args.overwrite)
    return 0


def _ship_command(args: argparse.Namespace) -> int:
    import json

    from slice_st.training.shipping import ship_adapter

    destination = args.output
    provenance = ship_adapter(args.run_dir, destination, dev_path=args.dev_path, sts_dev_path=args.sts_dev_path, overwrite=args.overwrite)
    print(json.dumps({"destination": destination, **provenance.get("dev_metrics", {})}, indent=2))
    return 0
