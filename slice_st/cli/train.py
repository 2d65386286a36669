"""slice-st train: SLICE training (slice_st.training.train) from the command line.

Its options are sentence-transformers' training arguments (--max-steps, --per-device-train-batch-size,
--learning-rate, --push-to-hub --hub-model-id ORG/NAME, ...) and slice_st.training.SliceArguments (--train-data,
--distill-data, --dev, --lora-r, ...), parsed by HfArgumentParser. --preset NAME or --config FILE (a JSON object of
settings) gives the defaults; options given with them override them.
"""

from __future__ import annotations

import json

from slice_st.cli.common import OUTPUT_FLAGS, UsageError, suggestion
from slice_st.training.trainer import PRESETS  # stdlib only: --help stays fast

_DESCRIPTION = __doc__.split("\n\n")[1]


def add_train_command(commands) -> None:
    parser = commands.add_parser(
        "train",
        help="train a SLICE model (SpanMaxCrossEntropyLoss and/or SpanDistillationLoss)",
        description=_DESCRIPTION,
        add_help=False,  # --help lists the trainer's arguments too: the handler's parser answers it
    )
    _own_arguments(parser, "--output-dir", "--output_dir")
    parser.set_defaults(handler=_train, takes_trainer_arguments=True)


def _own_arguments(parser, *flags: str) -> None:
    """``-o`` (the trainer's ``--output-dir``), ``--preset``, ``--config`` and the output switches; ``flags``: more of
    ``-o``'s."""
    parser.add_argument("-o", *flags, dest="output_dir", help="the run's folder: checkpoints, final/ (the best model)")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="documented settings; options override them")
    parser.add_argument("--config", metavar="FILE", help="settings as one JSON object (the options' names)")
    for flag, text in OUTPUT_FLAGS.items():
        parser.add_argument(flag, action="store_true", help=text)


def _train(args) -> int:
    from slice_st.training import trainer

    trainer.train(*parse_train_arguments(args))  # checks the output folder before any work
    return 0


def parse_train_arguments(args):
    """``(SentenceTransformerTrainingArguments, SliceArguments)`` of ``slice-st train``'s parsed ``args``: the
    defaults, the preset's, the ``--config`` file's, then the options."""
    from slice_st.training import trainer

    parser = _trainer_parser()
    defaults = {**trainer.TRAINING_DEFAULTS, **trainer.PRESETS.get(args.preset, {}), **_read_config(args.config)}
    # No folder given is an error here, not the trainer's silent "trainer_output".
    defaults["output_dir"] = args.output_dir or defaults.get("output_dir") or ""
    defaults.update({"disable_tqdm": True} if args.no_progress else {})
    known = {action.dest for action in parser._actions}
    unknown = sorted(set(defaults) - known)
    if unknown:
        where = args.config or "the preset"
        raise UsageError(f"unknown setting {unknown[0]!r} in {where}{suggestion(unknown[0], known)}")
    parser.set_defaults(**defaults)
    settings, training, *_, rest = parser.parse_args_into_dataclasses(
        args.trainer_arguments, return_remaining_strings=True, look_for_args_file=False
    )
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if not training.output_dir:
        raise UsageError("the run needs a folder: give -o/--output-dir DIR.")
    return training, settings


def _trainer_parser():
    from sentence_transformers import SentenceTransformerTrainingArguments
    from transformers import HfArgumentParser

    from slice_st.training import SliceArguments

    class Parser(HfArgumentParser):
        def error(self, message: str):
            option = message.split(": ", 1)[-1].split()[0] if "unrecognized" in message else ""
            option = option.split("=")[0]
            raise UsageError(message + suggestion(option, self._option_string_actions))

    usage = "slice-st train -o DIR [--preset NAME | --config FILE] [OPTION ...]"
    parser = Parser((SliceArguments, SentenceTransformerTrainingArguments), usage=usage, description=_DESCRIPTION)
    _own_arguments(parser.add_argument_group("slice-st train"))
    return parser


def _read_config(path: str | None) -> dict:
    from slice_st.files import read_file

    try:
        values = json.loads(read_file(path)) if path is not None else {}
    except json.JSONDecodeError as error:
        raise UsageError(f"--config {path}: not JSON ({error}).") from None
    if not isinstance(values, dict):
        raise UsageError(f"--config {path}: a JSON object of settings is needed, not a {type(values).__name__}.")
    return {key.replace("-", "_"): value for key, value in values.items()}
