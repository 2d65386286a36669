"""The ``slice-st`` command line, one module per command group; building the parser imports no torch (each handler
imports the library when it runs)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import stat
import sys
from collections.abc import Sequence

from slice_st import __version__
from slice_st.cli import evaluation, export, index, mine, serve
from slice_st.cli.common import output_options, suggestion, terminal_safe
from slice_st.cli.data import add_data_commands
from slice_st.cli.train import add_train_command
from slice_st.errors import SliceError

#: The top-level commands by what they are for, in the order ``slice-st --help`` lists them.
COMMAND_GROUPS = {
    "mining": ("mine", "serve"),
    "index": ("index",),
    "evaluation": ("mteb",),
    "training": ("train", "make-passages"),
    "export": ("export",),
}
#: Errors the user can fix besides :class:`~slice_st.errors.SliceError` (:class:`UsageError` is one): missing files,
#: permissions.
_KNOWN = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
#: A write that failed for want of room or of a working disk.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}
_BUG = "slice-st: unexpected error, most likely a bug: please open an issue with the command and the traceback below\n"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) with a did-you-mean (its sub-commands' parsers are of this class too)."""

    def error(self, message: str):
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        hint = ""
        if unknown:
            hint = suggestion(unknown.group(1).split("=")[0], self._option_string_actions)
        elif choice:
            hint = suggestion(choice.group(1), [c.strip("'") for c in choice.group(2).split(", ")])
        self.exit(2, f"slice-st: error: {message}{hint} (see {self.prog} --help)\n")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="slice-st",
        description="Phrase mining with SLICE span embeddings.",
        usage="%(prog)s [-h] [--version] COMMAND ...",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(
        prog="slice-st", dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS
    )
    for module in (mine, index, serve, evaluation, export):
        module.add_commands(commands)
    add_train_command(commands)
    add_data_commands(commands)
    helps = {action.dest: action.help for action in commands._choices_actions}
    width = max(map(len, helps)) + 2
    lines = ["commands (slice-st COMMAND --help for each):"]
    for title, names in COMMAND_GROUPS.items():
        lines += [f"  {title}:"] + [f"    {name:<{width}}{helps[name]}" for name in names]
    parser.epilog = "\n".join(lines)
    return parser


def _stdout_name() -> str:
    """Standard output, named by the file it goes to when it is one (``slice-st mine … > out.jsonl``)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode):
            return f"the output file {os.readlink(f'/proc/self/fd/{sys.stdout.fileno()}')} (standard output)"
    return "standard output"


def _model_refused(error: BaseException) -> bool:
    """A ``ValueError``/``TypeError`` of sentence-transformers' own checks raised inside ``slice_st.load_model`` (a
    model whose ``modules.json`` names a path outside it, an unknown ``default_prompt_name``): the library passes it
    on unchanged, as ``SentenceTransformer`` does; here it is the user's model, not a bug."""
    frame = error.__traceback__
    while frame is not None:
        code, module = frame.tb_frame.f_code.co_name, frame.tb_frame.f_globals.get("__name__")
        if code == "load_model" and module == "slice_st.loading":
            from slice_st.loading import raised_by_sentence_transformers

            return raised_by_sentence_transformers(error)
        frame = frame.tb_next
    return False


def _silence_stdout() -> None:
    """Point standard output at the null device: what is still buffered cannot be written (no second error at exit)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``slice-st``; returns the exit code. Bad input (an argument, a
    :class:`~slice_st.errors.SliceError`, a file) is one line ``slice-st: error: …`` (2); Ctrl-C is 130; anything
    else is a bug and keeps its traceback."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "takes_trainer_arguments", False):
        args.parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.trainer_arguments = rest
    with output_options(args):
        try:
            code = args.handler(args)
            sys.stdout.flush()  # what is still buffered fails here, not unseen at exit
            return code
        except KeyboardInterrupt:
            parser.exit(130, "slice-st: interrupted\n")
        except BrokenPipeError:  # e.g. `slice-st mine … | head`: stop quietly
            _silence_stdout()
            return 0
        except Exception as error:
            message = terminal_safe(" ".join(str(error).split()))
            if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS:
                # named before standard output is silenced
                where = terminal_safe(str(error.filename or _stdout_name()))
                _silence_stdout()
                message = f"cannot write {where}: {error.strerror or error}."
            elif _model_refused(error):
                message = f"cannot load the model: {message}"
            elif not isinstance(error, (SliceError, *_KNOWN)):
                sys.stderr.write(_BUG)
                raise
            parser.exit(2, f"slice-st: error: {message or type(error).__name__}\n")
