"""A proxy STS-B-Context set from STS-B: each pair's sentence2 placed verbatim inside other STS-B sentences.

No language model writes the passages (the released set's were), so the proxy is easier than the real set; it is
the dev set of the paper's reproduction and of the offline training triplets (:mod:`research.offline_data`).

python -m research.context DATA/stsbenchmark/sts-dev.csv -o runs/dev/stsb-context-dev.tsv --limit 1024
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import sys
from collections.abc import Sequence
from typing import Any

from research._cli import positive_int, run
from slice_st.data.stsb import STSB_CONTEXT_COLUMNS, read_stsb
from slice_st.errors import DataFormatError
from slice_st.files import check_output
from slice_st.text import one_line

#: The note beside a TSV saying where its passages come from, as ``slice_st.integrations.mteb.STSBContext`` reads it:
#: the released set (passages written by a language model), a ``make-context`` proxy (this module), or unknown.
SOURCE_SUFFIX = ".source.json"
CONTEXT_SOURCES = ("released", "make-context", "unknown")
CONTEXT_STYLES = ("preceding", "following", "surrounding", "clause")
_LEADS = (
    "According to the report:",
    "One caption simply read:",
    "Then came the update:",
    "As someone put it:",
    "The note said:",
    "Meanwhile, another line stood out:",
)
_TRAILS = (
    "— or so it was reported.",
    "— at least, that is how it was described.",
    "— nobody disputed that.",
    "— according to the caption.",
)
_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _too_close(candidate: set[str], targets: Sequence[set[str]], limit: float = 0.5) -> bool:
    """True when ``candidate`` shares half of its words (Jaccard) with any target."""
    return any(
        len(candidate & target) / len(candidate | target) >= limit
        for target in targets
        if candidate | target
    )


def _checked_pairs(pairs) -> tuple[list[dict], list[str]]:
    """The pairs as dicts, checked, and their distinct sentences (the context pool)."""
    rows = [dict(row) for row in pairs]
    for position, row in enumerate(rows):
        for key in ("sentence1", "sentence2", "score"):
            if key not in row:
                raise DataFormatError(f"pair {position} has no {key!r} field.")
        for key in ("sentence1", "sentence2"):
            if not isinstance(row[key], str) or not row[key].strip():
                raise DataFormatError(f"pair {position}: {key} is empty or not a string.")
    pool = list(
        dict.fromkeys(one_line(row[key]) for row in rows for key in ("sentence1", "sentence2"))
    )
    if len(pool) < 3:
        raise DataFormatError(
            f"need at least 3 distinct sentences to build context, got {len(pool)}."
        )
    return rows, pool


def _passage(
    rng: random.Random, origin: str, target: str, style: str, pool, pool_words, words: int
) -> str:
    """``target`` (verbatim) inside context sentences of ``pool`` unlike the pair's own, in ``style``."""
    own = [_words(origin), _words(target)]
    core = target
    if style == "clause":
        core = (
            f"{rng.choice(_LEADS)} {target}"
            if rng.random() < 0.5
            else f"{target} {rng.choice(_TRAILS)}"
        )
    context: list[str] = []
    count = len(core.split())
    for _ in range(200):
        if count >= words and context:
            break
        pick = rng.randrange(len(pool))
        sentence = pool[pick]
        if sentence in (origin, target) or sentence in context or _too_close(pool_words[pick], own):
            continue
        context.append(sentence)
        count += len(sentence.split())
    if not context:
        raise DataFormatError(
            f"found no context sentence unlike the pair's own sentences ({target!r:.60})."
        )
    if style == "preceding":
        return " ".join([*context, core])
    if style == "following":
        return " ".join([core, *context])
    cut = rng.randint(1, len(context)) if len(context) > 1 else rng.randint(0, 1)
    return " ".join([*context[:cut], core, *context[cut:]])


def make_context(
    pairs, *, seed: int = 0, styles: Sequence[str] = CONTEXT_STYLES, words: int = 40, limit=None
):
    """An STS-B-Context-style set: each pair's ``sentence2`` placed verbatim inside context.

    Context sentences are other sentences of the same pairs, never one of the pair's own nor one sharing half of
    its words with them, added until the passage has ``words`` words. Styles, chosen per pair: ``preceding``,
    ``following``, ``surrounding``, ``clause`` (a lead-in or a trailing clause). ``limit`` keeps a seeded sample,
    in file order. Same inputs and seed, same output.

    Args:
        pairs: A ``Dataset`` or dicts with ``sentence1``, ``sentence2``, ``score`` (as from ``read_stsb``).
        seed: Seed of the context, the styles and the sample.
        styles: Styles to choose from, per pair.
        words: Least number of words per passage.
        limit: Keep a seeded sample of that many pairs.

    Returns:
        A ``Dataset`` with ``line``, ``paraphrase``, ``passage``, ``goldsim``, ``style``, ``source_index``.

    Example:
        >>> pairs = [{"sentence1": "A man plays guitar.", "sentence2": "Someone is playing a guitar.", "score": 4.2},
        ...          {"sentence1": "The cat sleeps.", "sentence2": "A kitten is napping on a sofa.", "score": 3.5},
        ...          {"sentence1": "Stocks fell sharply.", "sentence2": "Markets dropped on Monday.", "score": 3.9}]
        >>> ctx = make_context(pairs, seed=1, words=12)
        >>> all(row["paraphrase"] in row["passage"] for row in ctx), len(ctx)
        (True, 3)
    """
    import datasets

    if not styles or any(style not in CONTEXT_STYLES for style in styles):
        raise DataFormatError(
            f"styles must be a non-empty subset of {CONTEXT_STYLES}, got {list(styles)}."
        )
    if words < 1 or (limit is not None and limit < 1):
        raise DataFormatError(f"words and limit must be >= 1, got {words} and {limit}.")
    rows, pool = _checked_pairs(pairs)
    pool_words = [_words(sentence) for sentence in pool]
    rng = random.Random(seed)
    chosen = (
        range(len(rows))
        if limit is None
        else sorted(rng.sample(range(len(rows)), min(limit, len(rows))))
    )
    out: dict[str, list[Any]] = {
        key: [] for key in ("line", "paraphrase", "passage", "goldsim", "style")
    }
    for position in chosen:
        origin, target = (
            one_line(rows[position]["sentence1"]),
            one_line(rows[position]["sentence2"]),
        )
        style = rng.choice(list(styles))
        values = (origin, target, _passage(rng, origin, target, style, pool, pool_words, words))
        for key, value in zip(out, (*values, float(rows[position]["score"]), style)):
            out[key].append(value)
    return datasets.Dataset.from_dict({**out, "source_index": list(chosen)})


def write_stsb_context(rows, path: str | os.PathLike, *, encoding: str = "utf-8") -> int:
    """Write rows (``line``, ``paraphrase``, ``passage``, ``goldsim``) as an STS-B-Context TSV; returns the count."""
    with open(path, "w", encoding=encoding, newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["", *STSB_CONTEXT_COLUMNS])
        count = 0
        for count, row in enumerate(rows, start=1):
            cells = [one_line(str(row[key])) for key in STSB_CONTEXT_COLUMNS[:3]]
            writer.writerow([count - 1, *cells, f"{float(row['goldsim']):g}"])
    return count


def write_source_note(path: str | os.PathLike, source: str, **details: Any) -> str:
    """Record beside ``path`` (``PATH.source.json``) where its passages come from, as ``STSBContext`` reads it."""
    if source not in CONTEXT_SOURCES:
        raise DataFormatError(f"source must be one of {CONTEXT_SOURCES}, got {source!r}.")
    note = os.fspath(path) + SOURCE_SUFFIX
    with open(note, "w", encoding="utf-8") as handle:
        json.dump({"format": "STS-B-Context", "source": source, **details}, handle, indent=1)
    return note


def _styles(value: str) -> list[str]:
    styles = [style.strip() for style in value.split(",") if style.strip()]
    unknown = [style for style in styles if style not in CONTEXT_STYLES]
    if unknown or not styles:
        raise ValueError(
            f"--styles: unknown style(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(CONTEXT_STYLES)}."
        )
    return styles


def _make_context_command(args) -> int:
    check_output(args.output, folder=False)
    styles = _styles(args.styles)
    rows = make_context(
        read_stsb(args.stsb), seed=args.seed, styles=styles, words=args.words, limit=args.limit
    )
    count = write_stsb_context(rows, args.output, encoding=args.encoding)
    details = dict(seed=args.seed, styles=styles, words=args.words, limit=args.limit, pairs=count)
    write_source_note(
        args.output, "make-context", created_by="python -m research.context", **details
    )
    lengths = [len(passage.split()) for passage in rows["passage"]]
    print(
        f"wrote {count} pairs to {args.output} (passages {min(lengths)}-{max(lengths)} words, mean "
        f"{sum(lengths) / len(lengths):.1f}; seed {args.seed}; from {args.stsb})"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m research.context", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "stsb", metavar="STS_FILE", help="STS-benchmark TSV, e.g. DATA/stsbenchmark/sts-dev.csv"
    )
    parser.add_argument("-o", "--output", required=True, help="output TSV (STS-B-Context format)")
    parser.add_argument(
        "--limit", type=positive_int, help="keep a seeded sample of N pairs (the paper uses 1,024)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--words",
        type=positive_int,
        default=40,
        help="minimum passage length in words (default 40)",
    )
    parser.add_argument(
        "--styles", default=",".join(CONTEXT_STYLES), help="comma-separated context styles"
    )
    parser.add_argument(
        "--encoding", default="utf-8", help="output encoding (the public file uses cp1252)"
    )
    return run(parser, _make_context_command, argv)


if __name__ == "__main__":
    sys.exit(main())
