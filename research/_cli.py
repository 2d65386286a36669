"""What the research scripts share on the command line: integer options checked while parsing, one error line."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Sequence

#: How to install what the lab imports besides slice-st (make install does it).
LAB_INSTALL = "pip install -r research/requirements.txt"


def int_at_least(minimum: int, why: str = ""):
    """An ``argparse`` type: an integer >= ``minimum``."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}{why}, got {number}")
        return number

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = int_at_least(1)


def json_ready(value):
    """``value`` with NaN/inf as ``None`` and numpy values as Python ones (strict JSON)."""
    if isinstance(value, dict):
        return {str(key): json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return json_ready(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps_json(value, **kwargs) -> str:
    return json.dumps(json_ready(value), allow_nan=False, **kwargs)


def run(parser: argparse.ArgumentParser, handler: Callable, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run ``handler(args)``; an error the user can fix ends with one line and status 2."""
    return handle(parser, handler, parser.parse_args(argv))


def handle(parser: argparse.ArgumentParser, handler: Callable, args: argparse.Namespace) -> int:
    """Run ``handler(args)``; an error the user can fix ends with one line and status 2."""
    if (
        getattr(args, "quiet", False)
        or getattr(args, "no_progress", False)
        or not getattr(args, "progress", True)
    ):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    from slice_st.errors import MissingExtraError

    try:
        return handler(args)
    except (ValueError, OSError, MissingExtraError) as error:
        parser.exit(
            2, f"{parser.prog}: error: {' '.join(str(error).split()) or type(error).__name__}\n"
        )
    except ModuleNotFoundError as error:  # a dependency of the lab, not of the package
        if error.name is None or importlib.util.find_spec(error.name.split(".")[0]) is not None:
            raise
        parser.exit(2, f"{parser.prog}: error: {error.name} is not installed: {LAB_INSTALL}\n")


def log(args, message: str) -> None:
    """A status line on standard error unless ``--quiet``."""
    if not getattr(args, "quiet", False):
        sys.stderr.write(message.rstrip("\n") + "\n")
