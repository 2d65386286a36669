"""The ``slice-st`` command line: a thin layer over the library, one module per command group.

    slice-st mine --query "a man plays the guitar" notes.txt calls/*.txt
    slice-st mine --queries phrases.txt --split paragraph --threshold 0.6 --format jsonl docs.txt

Nothing in the library imports this package. Building the parser imports only the command modules
(argparse); each handler imports the library (torch, sentence-transformers) when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from slice_st.cli.data import add_data_commands
from slice_st.cli.evaluation import add_evaluation_commands
from slice_st.cli.index import add_index_command
from slice_st.cli.mine import add_mine_command
from slice_st.cli.phrase_eval import add_phrase_eval_command
from slice_st.cli.train import add_train_command
from slice_st.text import TextRecord, read_texts

__all__ = ["main", "build_parser", "read_texts", "TextRecord"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slice-st", description="Phrase mining with SLICE span embeddings.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_mine_command(commands)
    add_index_command(commands)
    add_train_command(commands)
    add_data_commands(commands)  # make-passages, make-context
    add_evaluation_commands(commands)  # table, mteb
    add_phrase_eval_command(commands)  # PEARL's phrase tasks, Nugget's ParaBank PI
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slice-st")
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``slice-st``; returns the exit code (2 for bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, FileNotFoundError, IsADirectoryError) as error:
        parser.exit(2, f"slice-st: error: {error}\n")
    except BrokenPipeError:
        return 0
