"""The ``slice-st`` command line: a thin layer over the library, one module per command group.

    slice-st mine --query "a man plays the guitar" notes.txt calls/*.txt
    slice-st mine --queries phrases.txt --split paragraph --threshold 0.6 --format jsonl docs.txt

Nothing in the library imports this package. Building the parser imports only the command modules
(argparse); each handler imports the library (torch, sentence-transformers) when it runs.

Errors: every error the user can fix (bad option values, missing files or models, an offline Hub, bad
input data, a missing optional extra) ends the command with one line ``slice-st: error: …`` and exit
status 2; Ctrl-C ends it with ``slice-st: interrupted`` and status 130. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from slice_st.cli.common import add_output_options, apply_output_options, bare_ray_option
from slice_st.cli.data import add_data_commands
from slice_st.cli.evaluation import add_evaluation_commands
from slice_st.cli.export import add_export_command
from slice_st.cli.index import add_index_command
from slice_st.cli.mine import add_mine_command
from slice_st.cli.phrase_eval import add_phrase_eval_command
from slice_st.cli.train import MAINTAINER_COMMANDS, add_train_command
from slice_st.text import MissingExtraError, TextRecord, read_texts

__all__ = ["main", "build_parser", "read_texts", "TextRecord"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with parse errors worded like every other error (``slice-st: error: …``, exit status 2), that
    remembers its sub-command groups (``command_groups``) so that options can be added to every command."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.command_groups: list = []

    def add_subparsers(self, **kwargs):
        group = super().add_subparsers(**kwargs)  # its parsers are of this class too
        self.command_groups.append(group)
        return group

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"slice-st: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="slice-st", description="Phrase mining with SLICE span embeddings.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_mine_command(commands)
    add_index_command(commands)
    add_train_command(commands)
    add_data_commands(commands)  # make-passages, make-context
    add_evaluation_commands(commands)  # table, mteb
    add_phrase_eval_command(commands)  # PEARL's phrase tasks, Nugget's ParaBank PI
    add_export_command(commands)
    commands.metavar = "{" + ",".join(name for name in commands.choices if name not in MAINTAINER_COMMANDS) + "}"
    for command in _commands(parser):
        add_output_options(command)
    return parser


def _commands(parser: argparse.ArgumentParser):
    """Every leaf command's parser (``mine``, ``index build``, …)."""
    if not parser.command_groups:
        yield parser
    for group in parser.command_groups:
        for child in dict.fromkeys(group.choices.values()):  # aliases map to the same parser
            yield from _commands(child)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slice-st")
    except PackageNotFoundError:
        return "unknown"


#: Errors the user can fix; they end a command with one line. (``ValueError`` covers the library's own
#: ``SpanInputError``, ``DataFormatError``, ``CorpusError``; a model that cannot be loaded is a
#: ``slice_st.config.ModelLoadError``, an ``OSError``; a missing extra is a ``MissingExtraError``.)
USER_ERRORS = (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, MissingExtraError)


def _is_user_error(error: BaseException) -> bool:
    if isinstance(error, USER_ERRORS):
        return True
    config = sys.modules.get("slice_st.config")  # imported whenever a model was loaded
    return config is not None and isinstance(error, config.ModelLoadError)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``slice-st``; returns the exit code (2 for bad input, 130 when interrupted)."""
    parser = build_parser()
    args = parser.parse_args(bare_ray_option(sys.argv[1:] if argv is None else argv))
    restore = apply_output_options(args)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        parser.exit(130, "slice-st: interrupted\n")
    except BrokenPipeError:  # e.g. `slice-st mine … | head`: stop quietly
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except Exception as error:
        if not _is_user_error(error):
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        parser.exit(2, f"slice-st: error: {message}\n")
    finally:
        restore()  # main() may be called in-process (tests, notebooks): leave the environment as it was
