"""``slice-st index …``: build and maintain a corpus :class:`slice_st.SpanIndex` (``index search``: see mine.py)."""

from __future__ import annotations

import csv
import os
import sys
import time
from typing import TYPE_CHECKING

from slice_st.cli.common import (
    BACKEND,
    UsageError,
    add_command,
    at_least,
    dumps_json,
    load_cli_model,
    model_options,
    paragraph_note,
    pick,
    positive_int,
    refuse,
    report,
    report_skipped,
    terminal_safe,
    text_files,
)
from slice_st.cli.mine import add_search_command
from slice_st.files import check_output, csv_safe, expand_paths

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

#: How ``index build`` and ``index add`` read and encode the corpus.
_CORPUS = ("--split", "--follow-links", "--skip-bad", "--batch-size", "--device")
_BUILD = (*"--model --min-span --max-span --unit --force --ray --workers".split(), *BACKEND)
_SPAN_SETTINGS = ("min_span", "max_span", "unit", "dtype")
_NO_EXACT_TIER = (
    "keep no unit vectors (about 1/20 of the disk): searches re-encode their candidates"
)


def _add_build_options(build) -> None:
    """``index build``'s own options, beside the corpus and model ones it shares."""
    build.add_argument(
        "--dtype",
        choices=("float32", "float16"),
        help="unit vectors' precision (float32; float16 with --compress)",
    )
    build.add_argument(
        "--compress",
        metavar="SPEC",
        help="add a compressed tier kept in memory, e.g. pq48 (docs: corpus-index guide)",
    )
    build.add_argument(
        "--no-exact-tier", action="store_true", help=f"with --compress: {_NO_EXACT_TIER}"
    )
    build.add_argument(
        "--calibration", metavar="FILE", help="a calibration JSON to store with the index"
    )
    build.add_argument(
        "--gpus-per-worker", type=at_least(0, cast=float), default=0, metavar="G", help="with --ray"
    )
    build.add_argument(
        "--shard-mb", type=positive_int, metavar="MB", help="with --ray: MB of text per shard (16)"
    )


def add_commands(commands) -> None:
    index = add_command(commands, "index", "build and maintain a corpus SpanIndex")
    actions = index.add_subparsers(dest="index_command", required=True, metavar="COMMAND")
    add_search_command(actions)
    about = "encode a corpus into a new index directory"
    build = _command(
        actions, "build", about, _build, "--output", *_CORPUS, *_BUILD, directory=False
    )
    _add_build_options(build)
    about = "append documents to an index (saved atomically)"
    add = _command(actions, "add", about, _add, *_CORPUS, "--threads")
    add.add_argument(
        "--replace", action="store_true", help="replace the documents of files already in the index"
    )
    about = "drop documents by id, or a file's (saved atomically)"
    remove = _command(actions, "remove", about, _remove)
    remove.add_argument("ids", nargs="*", metavar="ID")
    remove.add_argument(
        "--file", metavar="PATH", help="drop every document of this file (see `index list`)"
    )
    about = "list an index's documents (a sharded one's too): ids, files, sizes"
    listing = _command(actions, "list", about, _list)
    listing.add_argument("-f", "--format", choices=("text", "json", "jsonl", "csv"), default="text")
    about = "merge index shards (built apart, e.g. in parallel) into one"
    merge = _command(actions, "merge", about, _merge, "--output", "--force", directory=False)
    merge.add_argument("shards", nargs="+", metavar="SHARD")
    info = _command(actions, "info", "print what an index holds (JSON)", _info)
    info.add_argument(
        "--verify", action="store_true", help="also check every file's SHA-256 against the manifest"
    )
    about = "fit cosine → STS 0–5 (isotonic) and store it with the index"
    calibrate = _command(actions, "calibrate", about, _calibrate)
    calibrate.add_argument(
        "--sts", required=True, metavar="TSV", help="an STS-benchmark file, e.g. sts-train.csv"
    )
    calibrate.add_argument("--pair-score", choices=("sentence", "best_span"), default="sentence")
    calibrate.add_argument("--limit", type=positive_int, help="use the first N pairs")
    calibrate.add_argument(
        "--save-json", metavar="FILE", help="also write the calibration JSON here"
    )
    about = "add (or retrain) the compressed tier of an index"
    compress = _command(actions, "compress", about, _compress)
    compress.add_argument(
        "--spec", default="pq48", help="pq<M>[,ivf<C>][,norms<bits>] (default pq48)"
    )
    compress.add_argument("--no-exact-tier", action="store_true", help=_NO_EXACT_TIER)
    about = "build the FAISS candidate stage (for --approximate)"
    candidates = _command(actions, "candidates", about, _candidates)
    candidates.add_argument("--kind", choices=("ivf", "flat"), default="ivf")
    defaults = {"chunk": 4, "stride": 2, "nlist": None, "nprobe": 128, "candidates": 512}
    for name, default in defaults.items():
        candidates.add_argument(f"--{name}", type=positive_int, default=default)


def _command(actions, name: str, help: str, handler, *options: str, directory: bool = True):
    """A sub-command of ``index``; ``directory``: it takes the index folder first; ``_CORPUS`` options: corpus files."""
    parser = add_command(actions, name, help, handler, *options)
    if directory:
        parser.add_argument("directory", metavar="DIR")
    if _CORPUS[0] in options:
        parser.add_argument(
            "corpus",
            nargs="+",
            metavar="CORPUS",
            help="text or JSONL files, folders or glob patterns",
        )
        parser.add_argument(
            "-f",
            "--format",
            choices=("text", "json", "jsonl"),
            default="text",
            help="summary format",
        )
        parser.add_argument(
            "--input-format", choices=("auto", "text", "jsonl", "parquet"), default="auto"
        )
        parser.add_argument(
            "--id-field", default="id", help="JSONL field holding the document id (default: id)"
        )
        parser.add_argument(
            "--text-field", default="text", help="JSONL field holding the text (default: text)"
        )
        parser.add_argument(
            "--devices",
            nargs="+",
            metavar="DEV",
            help="one encoding process per device, e.g. cuda:0",
        )
        parser.add_argument(
            "--processes", type=positive_int, metavar="N", help="encode in N CPU processes"
        )
    return parser


def _read_options(args) -> dict:
    """How the corpus files are read (``read_corpus`` / ``SpanIndex.from_files`` options)."""
    fmt = None if args.input_format == "auto" else args.input_format
    return {"split": args.split, "fmt": fmt, **pick(args, "id_field", "text_field")}


def _documents(args):
    from slice_st.data.corpus import read_corpus

    paths = expand_paths(args.corpus, follow_links=args.follow_links)
    paths = text_files(
        paths, lambda one: read_corpus(one, **_read_options(args)), getattr(args, "skip_bad", False)
    )
    documents = read_corpus(paths, **_read_options(args), report=paragraph_note(args))
    if not documents:
        raise UsageError(f"no documents in {', '.join(args.corpus)} (all empty?).")
    return documents


def _encoding(args) -> dict:
    """How ``index build`` / ``index add`` encode: batches, processes, bad texts, progress bars."""
    options = pick(args, "batch_size", "devices", "processes")
    options["on_error"] = "skip" if args.skip_bad else "raise"
    return options | {"show_progress_bar": not args.no_progress}


def _summary(verb: str, documents, index, seconds: float, args) -> None:
    skipped = {doc_id for doc_id, _ in index.skipped}
    documents = [d for d in documents if d.id not in skipped]
    words = sum(len(d.text.split()) for d in documents)
    rate, word_rate = (
        (len(documents) / seconds, words / seconds) if seconds > 0 else (float("inf"),) * 2
    )
    if args.format != "text":
        summary = dict(action=verb, documents=len(documents), words=words)
        summary.update(seconds=round(seconds, 3), documents_per_second=round(rate, 3))
        summary.update(index_documents=len(index), index_units=index.num_units)
        summary |= {"replaced": len(index.replaced)} if verb == "added" else {}
        summary |= {"skipped": sorted(skipped)}
        print(dumps_json(summary, indent=1 if args.format == "json" else None))
        return
    replaced = f" (replacing {len(index.replaced)})" if index.replaced else ""
    report(
        args,
        f"{verb} {len(documents)} documents{replaced} ({words} words) in {seconds:.1f} s: {rate:.1f} documents/s, "
        f"{word_rate:.0f} words/s; the index holds {len(index)} documents, {index.num_units} units",
    )


def _build(args) -> int:
    from slice_st.index import SpanIndex
    from slice_st.index.ray_cluster import check_address, probe_address, require_ray
    from slice_st.index.storage import MANIFEST, read_shard_list

    ray = args.ray is not None
    ray_options = {
        "--workers": args.workers,
        "--gpus-per-worker": args.gpus_per_worker,
        "--shard-mb": args.shard_mb,
    }
    parquet = args.input_format == "parquet" or any(
        path.lower().endswith(".parquet") for path in args.corpus
    )
    refuse(
        *(
            (not ray and value, f"{flag} is an option of --ray.")
            for flag, value in ray_options.items()
        ),
        (not ray and parquet, "Parquet corpora are read with --ray (pip install 'slice-st[ray]')."),
        (
            ray and (args.devices or args.processes),
            "--devices/--processes are for a one-machine build; use --workers.",
        ),
        (
            ray and args.calibration,
            "--calibration is not stored by a --ray build: fit it with `index calibrate`.",
        ),
    )
    if ray:  # the missing extra, a bad address and a closed port are said before the model loads
        address = check_address(args.ray)
        require_ray()
        probe_address(address)
    # a file, or no write permission: said now, not after encoding
    check_output(args.output, "index folder")
    previous = read_shard_list(args.output) if ray and os.path.isdir(args.output) else None
    if not args.force and (
        os.path.exists(os.path.join(args.output, MANIFEST)) or (previous or {}).get("complete")
    ):
        advice = (
            "another folder, or --force to rebuild it"
            if ray
            else "`slice-st index add`, or --force to replace it"
        )
        raise UsageError(f"{args.output} already holds an index: use {advice}.")
    # a bad corpus file is said before the model loads
    documents = None if ray else _documents(args)
    model = load_cli_model(args, **model_options(args))
    if ray:
        return _build_on_ray(args, model, address, resuming=previous is not None and not args.force)
    start = time.perf_counter()
    settings = pick(args, *_SPAN_SETTINGS) | _encoding(args)
    settings["exact_tier"] = not args.no_exact_tier
    index = SpanIndex.build(documents, model, compression=args.compress, **settings)
    report_skipped(index.skipped, "documents")
    seconds = time.perf_counter() - start
    if args.calibration:
        index.set_calibration(args.calibration)
    index.save(args.output, overwrite=args.force, timeout=None)
    _summary("indexed", documents, index, seconds, args)
    if args.format == "text":
        report(args, f"saved to {args.output}")
    return 0


def _build_on_ray(args, model: SentenceTransformer, address: str | None, resuming: bool) -> int:
    """``index build --ray``: :meth:`SpanIndex.from_files` with ``engine="ray"``; a rerun resumes."""
    from slice_st.index import SpanIndex

    if resuming:
        report(args, f"resuming the build in {args.output}", sys.stderr)

    def progress(group: dict) -> None:
        if not args.no_progress:
            shards = f"group {group['group']}: {len(group['shards'])} shards"
            counts = f"{group['documents']} documents, {group['units']} units"
            done = f"{group['built']} built, {group['reused']} already there"
            report(args, f"{shards}, {counts} ({done})", sys.stderr)

    options = dict(engine="ray", output=args.output, address=address, force=args.force)
    options.update(compression=args.compress, exact_tier=not args.no_exact_tier)
    shard_bytes = None if args.shard_mb is None else args.shard_mb << 20
    options.update(concurrency=args.workers, num_gpus=args.gpus_per_worker, shard_bytes=shard_bytes)
    options["progress"] = progress
    settings = {**_read_options(args), **pick(args, *_SPAN_SETTINGS), **_encoding(args)}
    result = SpanIndex.from_files(args.corpus, model, **settings, **options)
    report_skipped(result.skipped, "documents")
    seconds = result.seconds
    coded = (
        f", compressed {result.compression} ({result.shards_coded} shards coded with the build's codebooks)"
        if result.compression
        else ""
    )
    report(
        args,
        f"indexed {result.documents} documents ({result.units} units) on Ray in {seconds:.1f} s: {len(result.shards)} "
        f"shards ({result.shards_built} built, {result.shards_reused} already there){coded}, "
        f"{result.units / seconds if seconds > 0 else float('inf'):.0f} units/s; saved to {args.output}",
    )
    return 0


def _update(directory: str, **model_options):
    """``SpanIndex.open_for_update``: the writer lock held from load to save, waiting (with a message)."""
    from slice_st.index import SpanIndex

    return SpanIndex.open_for_update(
        directory, timeout=None, on_wait=_waiting(directory), **model_options
    )


def _waiting(directory: str):
    """``on_wait``: say on standard error that another process is changing the index, and that we wait."""
    busy = f"slice-st: {directory} is being changed by another process"
    return lambda holder: print(
        f"{busy} ({holder}); waiting for it to finish", file=sys.stderr, flush=True
    )


def _add(args) -> int:
    documents = _documents(args)
    with _update(args.directory, device=args.device, **model_options(args)) as index:
        start = time.perf_counter()
        index.add(documents, **_encoding(args), replace=args.replace)
        report_skipped(index.skipped, "documents")
        seconds = time.perf_counter() - start
    _summary("added", documents, index, seconds, args)
    return 0


def _remove(args) -> int:
    refuse((bool(args.ids) == bool(args.file), "give document IDs or --file PATH (one of them)."))
    with _update(args.directory) as index:
        removed = index.remove(args.ids or None, file=args.file)
    report(args, f"removed {removed} documents; the index holds {len(index)} documents")
    return 0


def _list(args) -> int:
    from slice_st.index import SpanIndex
    from slice_st.index.storage import shard_directories

    rows = [
        row
        for shard in shard_directories(args.directory)
        for row in SpanIndex.saved_documents(shard)
    ]
    if args.format == "json":
        print(dumps_json(rows, indent=1))
    elif args.format == "jsonl":
        sys.stdout.writelines(dumps_json(row) + "\n" for row in rows)
    elif args.format == "csv":
        writer = csv.DictWriter(
            sys.stdout, fieldnames=["id", "file", "characters", "units"], lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows({key: csv_safe(value) for key, value in row.items()} for row in rows)
    else:
        _list_table(rows)
    return 0


def _list_table(rows: list[dict]) -> None:
    """``index list`` as aligned columns, then how many documents and files."""
    shown = [
        (
            terminal_safe(row["id"]),
            terminal_safe(row["file"] or "-"),
            row["characters"],
            row["units"],
        )
        for row in rows
    ]
    wide = [
        max([len(title)] + [len(row[column]) for row in shown])
        for column, title in enumerate(("id", "file"))
    ]
    print(f"{'id':<{wide[0]}}  {'file':<{wide[1]}}  {'characters':>10}  {'units':>6}")
    for doc_id, file, characters, units in shown:
        print(f"{doc_id:<{wide[0]}}  {file:<{wide[1]}}  {characters:>10}  {units:>6}")
    files = len({row["file"] for row in rows if row["file"]})
    print(f"{len(rows)} documents, {files} files")


def _merge(args) -> int:
    from slice_st.index import SpanIndex

    merged = SpanIndex.merge_saved(
        args.shards, args.output, force=args.force, on_wait=_waiting(args.output)
    )
    units = f"{len(merged)} documents, {merged.num_units} units"
    report(args, f"merged {len(args.shards)} shards: {units} in {args.output}")
    return 0


def _info(args) -> int:
    from slice_st.index import SpanIndex

    print(dumps_json(SpanIndex.describe(args.directory, verify=args.verify), indent=2))
    return 0


def _calibrate(args) -> int:
    from slice_st.index.calibration import fit_sts_calibration

    if args.save_json:
        check_output(args.save_json, folder=False)
    with _update(args.directory) as index:
        calibration = fit_sts_calibration(index.model, args.sts, args.pair_score, limit=args.limit)
        index.set_calibration(calibration)
    if args.save_json:
        calibration.save(args.save_json)
    fit = f"{calibration.pairs} pairs of {calibration.source} ({calibration.pair_score} cosine"
    stored = f"{len(calibration.x)} thresholds stored with {args.directory}"
    report(args, f"calibrated on {fit}, Spearman {calibration.spearman}); {stored}")
    return 0


def _compress(args) -> int:
    return _build_part(
        args,
        "compressed tier",
        "compression",
        lambda index: index.compress(args.spec, exact_tier=not args.no_exact_tier),
    )


def _candidates(args) -> int:
    options = (args.kind, args.chunk, args.stride, args.nlist, args.nprobe, args.candidates)
    return _build_part(
        args, "candidate stage", "candidates", lambda index: index.build_candidates(*options)
    )


def _build_part(args, name: str, section: str, build) -> int:
    """Build a part of the index in ``args.directory`` (saved atomically) and report its ``info()[section]``."""
    start = time.perf_counter()
    with _update(args.directory) as index:
        build(index)
    part = dumps_json(index.info()[section])
    report(args, f"{name} built in {time.perf_counter() - start:.1f} s: {part}")
    return 0
