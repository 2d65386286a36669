"""Table 1 of the SLICE paper for your own systems: run systems × setups, write markdown and a bar chart.

    slice-st make-context DATA/stsbenchmark/sts-dev.csv -o runs/dev/stsb-context-dev.tsv --limit 1024
    python -m research.table runs/dev/stsb-context-dev.tsv --system default --system bm25 --system glove \\
        --system densephrases --out runs/dev/table --cache runs/dev/cache

Each (system, setup) result is cached as JSON (scores and best spans), keyed by what the system
computes (for a model, the fingerprint of its weights and tokenizer, never its folder name, so two
runs whose models are both called ``final`` never share results), the setup, the span settings and a
hash of the phrases and passages, so a table can be re-drawn or extended without re-running the slow
per-n-gram setup.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from research._cli import dumps_json, int_at_least, log, positive_int, run
from research.baselines import SETUPS
from research.statistics import compare_to_best
from slice_st.evaluation.localisation import span_localisation
from slice_st.evaluation.span_retrieval import SetupResult, correlations
from slice_st.files import atomic_file

__all__ = ["run_table", "markdown_table", "bar_chart", "data_fingerprint", "system_labels", "main"]

SETUP_TITLES = {"full": "Full context", "ngram": "Per-n-gram forward", "single": "Single forward"}
SIGNIFICANCE = 0.05


def data_fingerprint(phrases: Sequence[str], passages: Sequence[str]) -> str:
    """Short hash of the pairs, for cache keys.

    >>> data_fingerprint(["a"], ["b"]) == data_fingerprint(["a"], ["b"]) != data_fingerprint(["a"], ["c"])
    True
    """
    digest = hashlib.sha1()
    for phrase, passage in zip(phrases, passages):
        digest.update(phrase.encode("utf-8") + b"\x1f" + passage.encode("utf-8") + b"\x1e")
    return digest.hexdigest()[:12]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "system"


def cache_path(
    cache_dir: str,
    system_key: str,
    setup: str,
    min_span: int,
    max_span: int,
    unit: str,
    fingerprint: str,
) -> str:
    """Where the result of one (system, setup) on one data set is cached (``system_key``: :attr:`System.cache_key`)."""
    return os.path.join(
        cache_dir, f"{_slug(system_key)}__{setup}__{min_span}-{max_span}{unit}__{fingerprint}.json"
    )


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def save_result(path: str, result: SetupResult, **meta: Any) -> None:
    """Write a :class:`SetupResult` as strict JSON (a non-finite score is ``null``)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    payload = {
        **meta,
        "seconds": result.seconds,
        "extra": result.extra,
        "scores": [_finite_or_none(x) for x in result.scores],
        "spans": None if result.spans is None else [list(s) if s else None for s in result.spans],
    }
    with atomic_file(
        path, "w", encoding="utf-8"
    ) as handle:  # a new temporary file (never through a link), then os.replace
        json.dump(payload, handle, allow_nan=False)


def load_result(path: str) -> SetupResult:
    """Read a :class:`SetupResult` written by :func:`save_result`."""
    with open(path, encoding="utf-8") as handle:
        payload = json.load(handle)
    spans = (
        None if payload["spans"] is None else [tuple(s) if s else None for s in payload["spans"]]
    )
    scores = np.asarray([math.nan if x is None else x for x in payload["scores"]], dtype=np.float64)
    return SetupResult(scores, spans, payload.get("seconds", 0.0), payload.get("extra", {}))


def system_labels(systems: Sequence[Any]) -> list[str]:
    """Display names for the table: each system's ``name``, made unique by its cache key where two differ
    only in what they compute (``runA/final`` and ``runB/final`` if both are shown as ``final``: their
    fingerprints tell them apart). The same system given twice is an error.

    >>> class S:
    ...     def __init__(self, name, key): self.name, self.cache_key = name, key
    >>> system_labels([S("final", "st-1234567890abcdef"), S("final", "st-fedcba0987654321"), S("BM25", "bm25")])
    ['final [st-12345678]', 'final [st-fedcba09]', 'BM25']
    """
    keys = [system.cache_key for system in systems]
    names = [system.name for system in systems]
    for position, key in enumerate(keys):
        if key in keys[:position]:
            first = keys.index(key)
            raise ValueError(
                f"the same system is given twice: {names[first]!r} and {names[position]!r} (both {key})."
            )
    return [
        f"{name} [{key[:11]}]" if names.count(name) > 1 else name for name, key in zip(names, keys)
    ]


def subset_indices(total: int, size: int | None, seed: int = 0) -> list[int]:
    """A seeded sample of ``size`` pair indices in file order (all of them when ``size`` is None or ≥ total).

    >>> subset_indices(10, 4, seed=0)
    [0, 2, 6, 9]
    """
    import random

    if size is None or size >= total:
        return list(range(total))
    if size < 4:
        raise ValueError(
            f"a subset needs at least 4 pairs for correlations and the Williams test, got {size}."
        )
    return sorted(random.Random(seed).sample(range(total), size))


# ----------------------------------------------------------------------------------------- running
def run_table(
    systems: Sequence[Any],
    phrases: Sequence[str],
    passages: Sequence[str],
    gold: Sequence[float],
    *,
    setups: Sequence[str] = SETUPS,
    min_span: int = 1,
    max_span: int = 20,
    unit: str = "word",
    batch_size: int = 32,
    cache_dir: str | None = None,
    ngram_limit: int | None = None,
    seed: int = 0,
    log=None,
    show_progress_bar: bool | None = None,
) -> dict[str, dict[str, Any]]:
    """Score every system (:class:`research.baselines.System` or spec string) in every setup it has.

    Returns ``{setup: {"indices": [...], "gold": array, "results": {system label: SetupResult}}}`` (labels:
    :func:`system_labels`).
    ``ngram_limit`` runs the per-n-gram setup on a seeded sample of that many pairs (it costs N·K
    forward passes per passage); the other setups use all pairs. Results are cached in ``cache_dir``.
    """
    from research.baselines import make_system, timed

    for setup in setups:
        if setup not in SETUPS:
            raise ValueError(f"unknown setup {setup!r}; choose from {', '.join(SETUPS)}.")
    systems = [make_system(s) if isinstance(s, str) else s for s in systems]
    names = system_labels(
        systems
    )  # loads every model first: a missing one stops the run before any work
    table: dict[str, dict[str, Any]] = {}
    gold_array = np.asarray(gold, dtype=np.float64)
    for setup in setups:
        indices = subset_indices(len(phrases), ngram_limit if setup == "ngram" else None, seed)
        sub_phrases = [phrases[i] for i in indices]
        sub_passages = [passages[i] for i in indices]
        fingerprint = data_fingerprint(sub_phrases, sub_passages)
        results = {}
        for system, name in zip(systems, names):
            if setup not in system.setups:
                continue
            path = (
                cache_path(
                    cache_dir, system.cache_key, setup, min_span, max_span, unit, fingerprint
                )
                if cache_dir
                else None
            )
            if path and os.path.exists(path):
                result = load_result(path)
                source = "cached"
            else:
                result = timed(
                    system,
                    setup,
                    sub_phrases,
                    sub_passages,
                    min_span=min_span,
                    max_span=max_span,
                    unit=unit,
                    batch_size=batch_size,
                    show_progress_bar=show_progress_bar,
                )
                source = "ran"
                if path:
                    save_result(path, result, system=name, system_key=system.cache_key, setup=setup)
            if log:
                log(
                    f"{setup:>6}  {name:<40} {source} in {result.seconds:.1f} s on {len(indices)} pairs"
                )
            results[name] = result
        if results:  # a setup none of the systems has is left out of the table
            table[setup] = {
                "indices": indices,
                "gold": gold_array[indices],
                "results": results,
                "fingerprint": fingerprint,
            }
    if not table:
        raise ValueError(f"none of the systems {names} has any of the setups {list(setups)}.")
    return table


def table_metrics(
    table: dict[str, dict[str, Any]],
    passages: Sequence[str] | None = None,
    paraphrases: Sequence[str] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """``{setup: {system: {"pearson", "spearman", "p_pearson", "p_spearman", "n", "seconds"}}}``; the
    p-values are Williams tests against the best system of the setup (``nan`` for the best).

    With ``passages`` and ``paraphrases`` (all pairs, as given to :func:`run_table`), span setups also get
    where their best spans land (:func:`slice_st.evaluation.localisation.span_localisation`): ``exact``,
    ``word_f1``, ``strong_exact``, ``strong_word_f1`` (×100) and ``located``."""
    metrics: dict[str, dict[str, dict[str, float]]] = {}
    for setup, entry in table.items():
        results, gold = entry["results"], entry["gold"]
        predictions = {name: result.scores for name, result in results.items()}
        p_pearson = (
            compare_to_best(gold, predictions, "pearson")
            if len(results) > 1
            else dict.fromkeys(results, math.nan)
        )
        p_spearman = (
            compare_to_best(gold, predictions, "spearman")
            if len(results) > 1
            else dict.fromkeys(results, math.nan)
        )
        metrics[setup] = {}
        for name, result in results.items():
            pearson, spearman = correlations(gold, result.scores)
            metrics[setup][name] = {
                "pearson": pearson,
                "spearman": spearman,
                "p_pearson": p_pearson[name],
                "p_spearman": p_spearman[name],
                "n": len(gold),
                "seconds": result.seconds,
            }
            if passages is not None and paraphrases is not None and result.spans is not None:
                indices = entry["indices"]
                where = span_localisation(
                    [passages[i] for i in indices],
                    result.spans,
                    [paraphrases[i] for i in indices],
                    gold,
                )
                metrics[setup][name] |= {
                    key: where[key]
                    for key in ("located", "exact", "word_f1", "strong_exact", "strong_word_f1")
                }
    return metrics


def localisation_table(metrics: dict[str, dict[str, dict[str, float]]]) -> str:
    """Where the best spans land, per span setup and system (empty when no localisation was measured).

    >>> m = {"single": {"A": {"exact": 40.0, "word_f1": 88.0, "strong_exact": 50.0, "strong_word_f1": 90.0,
    ...     "located": 9}}}
    >>> print(localisation_table(m).splitlines()[2])
    | A | Single forward | 40.0 | 88.0 | 50.0 | 90.0 | 9 |
    """
    lines = []
    for setup in SETUPS:
        for name, values in metrics.get(setup, {}).items():
            if "exact" in values:
                lines.append(
                    f"| {name} | {SETUP_TITLES[setup]} | {values['exact']:.1f} | {values['word_f1']:.1f} | "
                    f"{values['strong_exact']:.1f} | {values['strong_word_f1']:.1f} | {int(values['located'])} |"
                )
    if not lines:
        return ""
    header = [
        "| System | Setup | Exact | Word-F1 | Exact (gold ≥ 3) | Word-F1 (gold ≥ 3) | Rows |",
        "|---|---|---|---|---|---|---|",
    ]
    return "\n".join(header + lines) + "\n"


def _cell(values: dict[str, float] | None, kind: str) -> str:
    if values is None:
        return "—"
    value, p_value = values[kind], values[f"p_{kind}"]
    text = f"{100 * value:.1f}"
    if math.isnan(p_value):
        return f"**{text}**"
    return text + ("†" if p_value < SIGNIFICANCE else "")


def markdown_table(
    metrics: dict[str, dict[str, dict[str, float]]],
    systems: Sequence[str] | None = None,
    title: str | None = None,
) -> str:
    """A Table-1-style markdown table: Pearson and Spearman (×100) per setup, best in bold, † when
    significantly worse than the best of its setup (Williams test, one-sided, p < 0.05).

    >>> m = {"single": {"A": {"pearson": .8, "spearman": .7, "p_pearson": math.nan, "p_spearman": math.nan, "n": 9,
    ...     "seconds": 1.0}}}
    >>> print(markdown_table(m).splitlines()[2])
    | A | **80.0** | **70.0** |
    """
    setups = [s for s in SETUPS if s in metrics]
    if systems is None:
        systems = list(dict.fromkeys(name for setup in setups for name in metrics[setup]))
    header = (
        "| System | "
        + " | ".join(f"{SETUP_TITLES[s]} Pearson | {SETUP_TITLES[s]} Spearman" for s in setups)
        + " |"
    )
    lines = [header, "|" + "---|" * (1 + 2 * len(setups))]
    for name in systems:
        cells = []
        for setup in setups:
            values = metrics[setup].get(name)
            cells += [_cell(values, "pearson"), _cell(values, "spearman")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    notes = []
    for setup in setups:
        n = next(iter(metrics[setup].values()))["n"] if metrics[setup] else 0
        timing = ", ".join(
            f"{name} {values['seconds']:.1f} s" for name, values in metrics[setup].items()
        )
        notes.append(f"{SETUP_TITLES[setup]}: n = {n} pairs; wall time {timing}.")
    text = (f"**{title}**\n\n" if title else "") + "\n".join(lines)
    text += (
        "\n\nBold: best in its setup. †: significantly worse than the best of its setup (Williams test, one-sided, p "
        "< 0.05). "
        "—: setup not applicable.\n" + "\n".join(f"* {note}" for note in notes) + "\n"
    )
    return text


def bar_chart(
    metrics: dict[str, dict[str, dict[str, float]]], path: str, title: str | None = None
) -> str:
    """Grouped bar chart (Spearman ×100 per setup, one bar per system) saved as PNG; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    setups = [s for s in SETUPS if s in metrics]
    systems = list(dict.fromkeys(name for setup in setups for name in metrics[setup]))
    colors = {name: f"C{k % 10}" for k, name in enumerate(systems)}
    figure, axis = plt.subplots(figsize=(2.2 + 2.2 * len(setups), 4.2))
    labelled: set[str] = set()
    for j, setup in enumerate(setups):
        present = [name for name in systems if name in metrics[setup]]
        width = 0.8 / max(len(present), 1)
        for k, name in enumerate(present):
            value = 100 * metrics[setup][name]["spearman"]
            bars = axis.bar(
                [j + (k - (len(present) - 1) / 2) * width],
                [value],
                width=width * 0.95,
                color=colors[name],
                label=None if name in labelled else name,
            )
            labelled.add(name)
            axis.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
    axis.set_xticks(range(len(setups)))
    axis.set_xticklabels(
        [f"{SETUP_TITLES[s]}\n(n = {next(iter(metrics[s].values()))['n']})" for s in setups]
    )
    axis.set_ylabel("Spearman × 100")
    lowest = min(
        (
            100 * v["spearman"]
            for setup in setups
            for v in metrics[setup].values()
            if not math.isnan(v["spearman"])
        ),
        default=0,
    )
    axis.set_ylim(min(0, lowest - 5), 100)
    axis.axhline(0, color="black", linewidth=0.6)
    axis.set_title(title or "STS-B-Context-style evaluation")
    axis.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    figure.savefig(path, dpi=130)
    plt.close(figure)
    return path


# ----------------------------------------------------------------------------------------- command line
DEFAULT_SYSTEMS = ("default", "bm25", "glove", "densephrases")
#: Correlations and the Williams test need at least this many pairs.
MIN_PAIRS = 4


def _setups(value: str) -> list[str]:
    """``--setups``: comma-separated setup names, checked while parsing."""
    setups = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in setups if name not in SETUPS]
    if unknown or not setups:
        raise argparse.ArgumentTypeError(
            f"unknown setup(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(SETUPS)}"
        )
    return setups


def build_parser() -> argparse.ArgumentParser:
    table = argparse.ArgumentParser(
        prog="python -m research.table",
        description="Score systems on an STS-B-Context(-style) TSV in the full / per-n-gram / single-pass setups.",
    )
    table.add_argument("data", metavar="DATA", help="STS-B-Context TSV (path or URL)")
    table.add_argument(
        "-s",
        "--system",
        action="append",
        default=None,
        help="system spec, repeatable: default, st:MODEL (or a model id/path), bm25, glove, densephrases[:MODEL] "
        f"(default: {' '.join(DEFAULT_SYSTEMS)})",
    )
    table.add_argument(
        "--setups",
        type=_setups,
        default=list(SETUPS),
        help="comma-separated setups (default: full,ngram,single)",
    )
    table.add_argument(
        "-o",
        "--out",
        default="runs/table",
        help="output folder for table.md, table.png, metrics.json, predictions.csv",
    )
    table.add_argument(
        "--cache",
        default=None,
        help="folder caching each (system, setup) result (default: OUT/cache)",
    )
    at_least_pairs = int_at_least(MIN_PAIRS, " (correlations and the Williams test need 4 pairs)")
    table.add_argument(
        "--limit", type=at_least_pairs, default=None, help="use a seeded sample of N pairs (N >= 4)"
    )
    table.add_argument(
        "--ngram-limit",
        type=at_least_pairs,
        default=None,
        help="run the per-n-gram setup on a seeded sample of N pairs, N >= 4 (it is N·K passes per passage)",
    )
    table.add_argument("--min-span", type=positive_int, default=1)
    table.add_argument("--max-span", type=positive_int, default=20)
    table.add_argument("--unit", choices=("word", "token"), default="word")
    table.add_argument("--batch-size", type=positive_int, default=32)
    table.add_argument("--seed", type=int, default=0)
    table.add_argument("--title", default=None)
    table.add_argument("--missing-paraphrase", choices=("warn", "error", "drop"), default="warn")
    table.add_argument("--no-progress", action="store_true", help="hide progress bars")
    table.add_argument("--quiet", action="store_true", help="print only the table and errors")
    return table


def _table_command(args) -> int:
    from research.baselines import make_system
    from slice_st.data import read_stsb_context

    if args.min_span > args.max_span:
        raise ValueError(f"--min-span ({args.min_span}) must be <= --max-span ({args.max_span}).")
    data = read_stsb_context(args.data, missing_paraphrase=args.missing_paraphrase)
    if args.limit is not None and args.ngram_limit is not None and args.ngram_limit > args.limit:
        raise ValueError(
            f"--ngram-limit ({args.ngram_limit}) cannot exceed --limit ({args.limit})."
        )
    indices = subset_indices(len(data), args.limit, args.seed)
    phrases = [data["line"][i] for i in indices]
    passages = [data["passage"][i] for i in indices]
    gold = [data["goldsim"][i] for i in indices]
    systems = [make_system(spec) for spec in (args.system or list(DEFAULT_SYSTEMS))]
    labels = system_labels(
        systems
    )  # loads every model now: a missing one stops here, before any scoring
    cache = args.cache or os.path.join(args.out, "cache")

    table = run_table(
        systems,
        phrases,
        passages,
        gold,
        setups=args.setups,
        min_span=args.min_span,
        max_span=args.max_span,
        unit=args.unit,
        batch_size=args.batch_size,
        cache_dir=cache,
        ngram_limit=args.ngram_limit,
        seed=args.seed,
        log=lambda message: log(args, message),
        show_progress_bar=False if args.no_progress else None,
    )
    paraphrases = [data["paraphrase"][i] for i in indices]
    metrics = table_metrics(table, passages, paraphrases)
    title = (
        args.title
        or f"{os.path.basename(str(args.data))}: spans {args.min_span}..{args.max_span} {args.unit}s"
    )
    text = markdown_table(metrics, title=title)
    where = localisation_table(metrics)
    if where:  # single pass: the "phrase" span scorer unless a system says otherwise ("default@max-cosine")
        text += (
            "\n**Where the best span lands** (against the paraphrase's place; single pass: the system's span scorer, "
            '"phrase" unless its label names another; per-n-gram: max cosine)\n\n' + where
        )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    systems_info = {
        label: {"key": system.cache_key, "spec": spec}
        for label, system, spec in zip(labels, systems, args.system or list(DEFAULT_SYSTEMS))
    }
    with open(os.path.join(args.out, "metrics.json"), "w", encoding="utf-8") as handle:
        handle.write(
            dumps_json(
                {
                    "data": str(args.data),
                    "pairs": len(indices),
                    "systems": systems_info,
                    "metrics": metrics,
                },
                indent=1,
            )
            + "\n"
        )
    _write_predictions(os.path.join(args.out, "predictions.csv"), table, phrases, passages)
    bar_chart(metrics, os.path.join(args.out, "table.png"), title=title)
    print(text)
    log(args, f"wrote {args.out}/table.md, table.png, metrics.json, predictions.csv")
    return 0


def _write_predictions(path: str, table, phrases, passages) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["pair", "setup", "system", "gold", "score", "start", "end", "span", "phrase"]
        )
        for setup, entry in table.items():
            for name, result in entry["results"].items():
                for k, index in enumerate(entry["indices"]):
                    span = result.spans[k] if result.spans else None
                    writer.writerow(
                        [
                            index,
                            setup,
                            name,
                            entry["gold"][k],
                            f"{result.scores[k]:.6f}",
                            *(span if span else ("", "")),
                            passages[index][span[0] : span[1]] if span else "",
                            phrases[index],
                        ]
                    )


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _table_command, argv)


if __name__ == "__main__":
    sys.exit(main())
