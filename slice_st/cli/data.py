"""``slice-st make-passages``: unlabeled text cut into passages for span self-distillation.

Build a distillation passages folder for `slice-st train --distill-data DIR`. Text files are read as `slice-st mine`
reads them (--split: a hard-wrapped file is read by paragraphs, and its passages are stretches of that file). Dev
sentences (--exclude) never reach a passage. With --cache-teacher the teacher's span vectors are computed once and
saved.
"""

from __future__ import annotations

import sys
import time

from slice_st.cli.common import (
    UsageError,
    add_command,
    paragraph_note,
    pick,
    positive_int,
    report,
    terminal_safe,
)
from slice_st.files import check_output


def add_data_commands(commands) -> None:
    about = "cut unlabeled text into passages for span self-distillation (optionally caching teacher vectors)"
    options = ("--output", "--split", "--follow-links", "--batch-size")
    parser = add_command(commands, "make-passages", about, _make_passages, *options, batch_size=64)
    parser.description = __doc__.split("\n\n")[1]
    sources = "text/TSV/JSONL files, folders or globs ('-': stdin) | saved datasets folders"
    parser.add_argument("sources", nargs="+", metavar="SOURCE", help=sources)
    exclude = "STS-B or STS-B-Context file whose sentences are kept out (repeatable)"
    parser.add_argument("--exclude", action="append", default=[], metavar="FILE", help=exclude)
    parser.add_argument("--min-words", type=positive_int, default=20)
    parser.add_argument("--max-words", type=positive_int, default=80)
    parser.add_argument(
        "--limit", type=positive_int, default=None, help="keep a seeded sample of N passages"
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--cache-teacher", action="store_true", help="add a 'label' column: spans, teacher vectors"
    )
    parser.add_argument(
        "-m", "--model", help="the student/base model (default: the embedded all-MiniLM-L6-v2)"
    )
    parser.add_argument("--teacher", help="teacher model (default: the base model itself)")
    parser.add_argument(
        "--spans", type=positive_int, default=8, help="spans per passage (default 8)"
    )
    parser.add_argument(
        "--max-span", type=positive_int, default=12, help="longest span in words (default 12)"
    )
    length = "the training run's max_seq_length (must match it)"
    parser.add_argument("--max-seq-length", type=positive_int, default=None, help=length)


def _reading_note(args):
    """``load_passages``' ``report``: which files ``--split auto`` reads by paragraphs, and a warning for each file
    whose hard-wrapped lines ``--split line`` makes texts of their own (short ones are glued with other files')."""
    note = paragraph_note(args)

    def tell(path: str, how: str) -> None:
        if how == "wrapped-lines":
            message = (
                f"slice-st: warning: {terminal_safe(path)}: its lines are hard-wrapped, but --split line makes each "
                "line a text (lines under --min-words words are shuffled with other texts and glued); --split auto "
                "or paragraph reads its paragraphs"
            )
            report(args, message, sys.stderr)
        note(path, how)

    return tell


def _make_passages(args) -> int:
    from slice_st.data.passages import load_passages

    check_output(args.output)
    started = time.perf_counter()
    options = pick(args, "min_words", "max_words", "seed", "limit", "split", "follow_links")
    passages = load_passages(
        args.sources, exclude_paths=args.exclude, report=_reading_note(args), **options
    )
    if len(passages) == 0:
        raise UsageError(
            f"no passages from {', '.join(args.sources)}: the sources are empty, or no text reached "
            f"--min-words {args.min_words} after excluding the dev sentences. Nothing was saved."
        )
    report(args, f"{len(passages)} passages ({time.perf_counter() - started:.1f} s)", sys.stderr)
    if args.cache_teacher:
        from slice_st.config import enable_span_features
        from slice_st.loading import load_model
        from slice_st.losses import SpanDistillationLoss

        # the student before training: the base
        model = enable_span_features(load_model(args.model or "base"))
        if args.max_seq_length is not None:
            model.max_seq_length = args.max_seq_length
        loss = SpanDistillationLoss(
            model, teacher=args.teacher, spans_per_text=args.spans, max_span=args.max_span
        )
        started = time.perf_counter()
        options = pick(args, "batch_size", "seed") | {"show_progress_bar": not args.no_progress}
        passages = loss.cache_teacher_vectors(passages, **options)
        seconds = time.perf_counter() - started
        speed = len(passages) / max(seconds, 1e-9)
        report(args, f"teacher vectors: {seconds:.1f} s ({speed:.1f} passages/s)", sys.stderr)
    passages.save_to_disk(args.output)
    report(args, f"saved {args.output}", sys.stderr)
    return 0
