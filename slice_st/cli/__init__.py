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
import errno
import os
import re
import stat
import sys
from collections.abc import Sequence

from slice_st.cli.common import add_output_options, apply_output_options, bare_ray_option, terminal_safe
from slice_st.cli.data import add_data_commands
from slice_st.cli.evaluation import add_evaluation_commands
from slice_st.cli.export import add_export_command
from slice_st.cli.index import add_index_command
from slice_st.cli.mine import add_mine_command
from slice_st.cli.serve import add_serve_command
from slice_st.cli.train import add_train_command
from slice_st.errors import FileAccessError, MissingExtraError, ModelLoadError

__all__ = [
    "main",
]


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

    def format_help(self) -> str:
        return plain_text(super().format_help())

    def format_usage(self) -> str:
        return plain_text(super().format_usage())


#: The top-level commands by what they are for, in the order ``slice-st --help`` lists them.
COMMAND_GROUPS = {
    "mining": ("mine", "serve"),
    "index": ("index",),
    "evaluation": ("mteb",),
    "training": ("train", "make-passages", "make-context"),
    "export": ("export",),
}

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|obj|exc):`~?([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``")


def plain_text(text: str) -> str:
    """Help text without Sphinx markup: ````x```` → ``x``, ``:class:`~a.B``` → ``a.B``.

    >>> plain_text("``slice-st index`` over :class:`slice_st.SpanIndex` and :func:`~slice_st.best_spans`")
    'slice-st index over slice_st.SpanIndex and slice_st.best_spans'
    """
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


def _grouped_commands(commands) -> str:
    """The command list of ``slice-st --help``, one block per :data:`COMMAND_GROUPS` entry."""
    helps = {action.dest: action.help or "" for action in commands._choices_actions}
    listed = [name for names in COMMAND_GROUPS.values() for name in names]
    groups = dict(COMMAND_GROUPS)
    if set(helps) - set(listed):
        groups["other"] = tuple(sorted(set(helps) - set(listed)))
    width = max(len(name) for name in helps) + 2
    lines = ["commands (slice-st COMMAND --help for each):"]
    for title, names in groups.items():
        lines.append(f"  {title}:")
        lines.extend(f"    {name:<{width}}{helps[name]}" for name in names if name in helps)
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="slice-st",
        description="Phrase mining with SLICE span embeddings.",
        usage="%(prog)s [-h] [--version] COMMAND ...",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(
        prog="slice-st", dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS
    )
    add_mine_command(commands)
    add_index_command(commands)
    add_serve_command(commands)
    add_train_command(commands)
    add_data_commands(commands)  # make-passages, make-context
    add_evaluation_commands(commands)  # mteb
    add_export_command(commands)
    commands.metavar = "{" + ",".join(commands.choices) + "}"
    for command in _commands(parser):
        add_output_options(command)
    parser.epilog = _grouped_commands(commands)
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
#: ``SpanInputError``, ``DataFormatError``, ``CorpusError``.)
USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    MissingExtraError,
    FileAccessError,
    ModelLoadError,
)


def _is_user_error(error: BaseException) -> bool:
    return isinstance(error, USER_ERRORS)


#: A write that failed for want of room or of a working disk: a full disk, a quota, a file too large, an I/O error.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}


def _stdout_name() -> str:
    """Standard output, named by the file it goes to when it is one (``slice-st mine … > out.jsonl``)."""
    try:
        if stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode):
            return f"the output file {os.readlink(f'/proc/self/fd/{sys.stdout.fileno()}')} (standard output)"
    except (OSError, ValueError, AttributeError):
        pass
    return "standard output"


def _silence_stdout() -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


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
    except OSError as error:
        if error.errno not in _WRITE_ERRNOS:
            if not _is_user_error(error):
                raise
            parser.exit(2, f"slice-st: error: {terminal_safe(' '.join(str(error).split())) or type(error).__name__}\n")
        _silence_stdout()  # what is still buffered cannot be written either: no second error at exit
        where = error.filename or _stdout_name()
        parser.exit(2, f"slice-st: error: cannot write {terminal_safe(str(where))}: {error.strerror or error}.\n")
    except Exception as error:
        if not _is_user_error(error):
            raise
        message = terminal_safe(" ".join(str(error).split())) or type(error).__name__
        parser.exit(2, f"slice-st: error: {message}\n")
    finally:
        restore()  # main() may be called in-process (tests, notebooks): leave the environment as it was
