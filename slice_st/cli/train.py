"""slice-st train: SLICE training (slice_st.training.train) from the command line.

Its options are the SLICE settings (slice_st.training.SliceArguments: --train-data, --distill-data, --dev,
--lora-r, ...) and sentence-transformers' training arguments (--max-steps, --per-device-train-batch-size,
--learning-rate, --push-to-hub --hub-model-id ORG/NAME, ...; --help shows the common ones, --help-all all of them),
parsed by HfArgumentParser. --preset NAME or --config FILE (a JSON object of settings) gives the defaults; options
given with them override them. At the end it says where the model went.
"""

from __future__ import annotations

import argparse
import json
import os

from slice_st.cli.common import OUTPUT_FLAGS, UsageError, suggestion
from slice_st.training.trainer import PRESETS  # stdlib only: --help stays fast

_DESCRIPTION = __doc__.split("\n\n")[1]
#: sentence-transformers' training arguments that ``slice-st train --help`` lists (``--help-all``: every one).
COMMON_TRAINING_ARGUMENTS = (
    *"max_steps num_train_epochs per_device_train_batch_size gradient_accumulation_steps".split(),
    *"learning_rate warmup_steps weight_decay eval_steps save_steps save_total_limit".split(),
    *"logging_steps seed bf16 fp16 use_cpu report_to multi_dataset_batch_sampler".split(),
    *"push_to_hub hub_model_id hub_private_repo hub_strategy".split(),
)
_TRAINER_GROUP = "sentence-transformers training arguments (SentenceTransformerTrainingArguments)"


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
    where = "the run's folder: checkpoints, final/ (the best model)"
    parser.add_argument("-o", *flags, dest="output_dir", metavar="DIR", help=where)
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), help="documented settings; options override them"
    )
    parser.add_argument(
        "--config", metavar="FILE", help="settings as one JSON object (the options' names)"
    )
    for flag, text in OUTPUT_FLAGS.items():
        parser.add_argument(flag, action="store_true", help=text)


def _train(args) -> int:
    from slice_st.training import trainer

    training, settings = parse_train_arguments(args)
    end = _run_end()
    trainer.train(training, settings, callbacks=[end])  # checks the output folder before any work
    # one process says it, under accelerate too
    if end.state is None or end.state.is_world_process_zero:
        print("\n".join(where_the_model_went(training, end.state, end.metric)))
    return 0


def where_the_model_went(training, state=None, metric: str | None = None) -> list[str]:
    """What ``slice-st train`` prints at the end: the final model's folder, the checkpoint it is (the best by the dev
    score, when one was chosen), and the Hub URL it was pushed to."""
    line = f"saved {os.path.join(training.output_dir, 'final')}"
    if state is not None and state.best_model_checkpoint is not None:
        line += f" (the best checkpoint, {state.best_model_checkpoint}: {metric} {state.best_metric:.4f})"
    elif state is not None and state.best_global_step == 0:
        line += f" (the last step's model; no checkpoint beat the dev score before training, {state.best_metric:.4f})"
    lines = [line]
    if training.push_to_hub:
        from huggingface_hub import constants

        lines.append(f"pushed to {constants.ENDPOINT}/{training.hub_model_id}")
    return lines


def _run_end():
    """A trainer callback that keeps the trainer's state and best-model metric as training ends."""
    from transformers import TrainerCallback

    class RunEnd(TrainerCallback):
        state, metric = None, None

        def on_train_end(self, args, state, control, **kwargs):
            self.state, self.metric = state, args.metric_for_best_model

    return RunEnd()


def parse_train_arguments(args):
    """``(SentenceTransformerTrainingArguments, SliceArguments)`` of ``slice-st train``'s parsed ``args``: the
    defaults, the preset's, the ``--config`` file's, then the options."""
    from slice_st.training import trainer

    parser = _trainer_parser()
    defaults = {
        **trainer.TRAINING_DEFAULTS,
        **trainer.PRESETS.get(args.preset, {}),
        **_read_config(args.config),
    }
    # No folder given is an error here, not the trainer's silent "trainer_output".
    defaults["output_dir"] = args.output_dir or defaults.get("output_dir") or ""
    defaults.update({"disable_tqdm": True} if args.no_progress else {})
    known = {action.dest for action in parser._actions}
    unknown = sorted(set(defaults) - known)
    if unknown:
        where = args.config or "the preset"
        raise UsageError(
            f"unknown setting {unknown[0]!r} in {where}{suggestion(unknown[0], known)}"
        )
    parser.set_defaults(**defaults)
    settings, training, *_, rest = parser.parse_args_into_dataclasses(
        args.trainer_arguments, return_remaining_strings=True, look_for_args_file=False
    )
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if not training.output_dir:
        raise UsageError("the run needs a folder: give -o/--output-dir DIR.")
    return training, settings


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown where they say something: not ``None``, an empty list or a switch's off, nor twice."""

    def _get_help_string(self, action):
        nothing = action.default in (None, [], "") or (
            action.nargs == 0 and action.default is False
        )
        if nothing or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class _HelpAll(argparse.Action):
    """``--help-all``: the help with every training argument, then exit."""

    def __init__(self, option_strings, dest, hidden: dict, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)
        self.hidden = hidden

    def __call__(self, parser, namespace, values, option_string=None):
        for action, text in self.hidden.items():
            action.help = text
        parser._optionals.title = _TRAINER_GROUP
        parser.print_help()
        parser.exit()


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
    dataclasses = (SliceArguments, SentenceTransformerTrainingArguments)
    parser = Parser(
        dataclasses,
        usage=usage,
        description=_DESCRIPTION,
        add_help=False,
        formatter_class=_HelpFormatter,
    )
    # SliceArguments' fields have their own group (its _argument_group_name); the trainer's are in the parser's
    # default one, which argparse lists first: the SLICE settings go first, then this command's, then the trainer's.
    trainer_group = parser._optionals
    slice_group = next(
        group
        for group in parser._action_groups
        if group.title == SliceArguments._argument_group_name
    )
    own = parser.add_argument_group("slice-st train")
    _own_arguments(own)
    own.add_argument(
        "-h",
        "--help",
        action="help",
        help="show the SLICE settings and the common training arguments",
    )
    hidden = {
        action: action.help
        for action in trainer_group._group_actions
        if action.dest not in COMMON_TRAINING_ARGUMENTS
    }
    own.add_argument(
        "--help-all", action=_HelpAll, hidden=hidden, help="show every training argument"
    )
    for action in hidden:
        action.help = argparse.SUPPRESS
    trainer_group.title = (
        f"{_TRAINER_GROUP}, the common ones (--help-all: all {len(trainer_group._group_actions)})"
    )
    others = [
        group for group in parser._action_groups if group not in (slice_group, own, trainer_group)
    ]
    parser._action_groups = [*others, slice_group, own, trainer_group]
    return parser


def _read_config(path: str | None) -> dict:
    from slice_st.files import read_file

    try:
        values = json.loads(read_file(path)) if path is not None else {}
    except json.JSONDecodeError as error:
        raise UsageError(f"--config {path}: not JSON ({error}).") from None
    if not isinstance(values, dict):
        raise UsageError(
            f"--config {path}: a JSON object of settings is needed, not a {type(values).__name__}."
        )
    return {key.replace("-", "_"): value for key, value in values.items()}
