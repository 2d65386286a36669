"""``slice-st index …``: build and maintain a corpus :class:`slice_st.SpanIndex`.

slice-st index build calls/*.txt tickets.jsonl -o runs/corpus-index
slice-st index add runs/corpus-index new_calls.txt
slice-st index info runs/corpus-index
slice-st index merge shard-*/ -o runs/corpus-index      # shards built in parallel processes
slice-st index calibrate runs/corpus-index --sts DATA/stsbenchmark/sts-train.csv
slice-st index build big.jsonl -o runs/big --processes 2           # or --devices cuda:0 cuda:1
slice-st index build calls/ -o runs/calls --workers 2 --ray        # on Ray (here; --ray auto: a cluster), resumable
slice-st index search runs/calls --query "my bag was lost" --ray   # its shards scanned on Ray actors
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from slice_st.cli.common import (
    UsageError,
    add_backend_arguments,
    add_format_argument,
    add_ray_argument,
    check_output,
    dumps_json,
    expand_inputs,
    model_options,
    positive_int,
    quiet_progress,
    report,
    report_skipped,
)
from slice_st.cli.mine import add_search_command
from slice_st.text import SPLITS


def add_index_command(commands) -> None:
    index = commands.add_parser(
        "index", help="build and maintain a corpus SpanIndex", description=__doc__.splitlines()[0]
    )
    actions = index.add_subparsers(dest="index_command", required=True)
    add_search_command(actions)
    _add_build_command(actions)
    add = actions.add_parser("add", help="append documents to an index (saved atomically)")
    add.add_argument("directory", metavar="DIR")
    _corpus_arguments(add)
    add.add_argument("--threads", type=positive_int, help="intra-op threads of the forward pass")
    add.set_defaults(handler=_add)

    remove = actions.add_parser("remove", help="drop documents by id (saved atomically)")
    remove.add_argument("directory", metavar="DIR")
    remove.add_argument("ids", nargs="+", metavar="ID")
    remove.set_defaults(handler=_remove)

    merge = actions.add_parser("merge", help="merge index shards (built separately, e.g. in parallel) into one")
    merge.add_argument("shards", nargs="+", metavar="SHARD")
    merge.add_argument("-o", "--output", required=True, metavar="DIR")
    merge.add_argument("--force", action="store_true", help="replace an index already in DIR")
    merge.set_defaults(handler=_merge)

    info = actions.add_parser("info", help="print what an index holds (JSON)")
    info.add_argument("directory", metavar="DIR")
    info.add_argument("--verify", action="store_true", help="also check every file's SHA-256 against the manifest")
    info.set_defaults(handler=_info)

    calibrate = actions.add_parser("calibrate", help="fit cosine → STS 0–5 (isotonic) and store it with the index")
    calibrate.add_argument("directory", metavar="DIR")
    calibrate.add_argument("--sts", required=True, metavar="TSV", help="an STS-benchmark file, e.g. sts-train.csv")
    calibrate.add_argument("--pair-score", choices=("sentence", "best_span"), default="sentence")
    calibrate.add_argument("--limit", type=positive_int, help="use the first N pairs")
    calibrate.add_argument("--save-json", metavar="FILE", help="also write the calibration JSON here")
    calibrate.set_defaults(handler=_calibrate)

    candidates = actions.add_parser("candidates", help="build the FAISS candidate stage (for mine --approximate)")
    candidates.add_argument("directory", metavar="DIR")
    candidates.add_argument("--kind", choices=("ivf", "flat"), default="ivf")
    for name, default in (("chunk", 4), ("stride", 2), ("nlist", None), ("nprobe", 128), ("candidates", 512)):
        candidates.add_argument(f"--{name}", type=positive_int, default=default)
    candidates.set_defaults(handler=_candidates)


def _corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "corpus", nargs="+", metavar="CORPUS", help="text or JSONL files, folders (recursively) or glob patterns"
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="auto",
        help="what a document of a text file is: a line, a paragraph, or auto (paragraphs when lines are wrapped)",
    )
    add_format_argument(parser, formats=("text", "json", "jsonl"))
    parser.add_argument(
        "--input-format",
        choices=("auto", "text", "jsonl", "parquet"),
        default="auto",
        help="auto: .jsonl/.ndjson files are JSONL, .parquet Parquet (with --ray)",
    )
    parser.add_argument("--follow-links", action="store_true", help="also read file links out of a folder named")
    parser.add_argument("--id-field", default="id", help="JSONL field holding the document id (default: id)")
    parser.add_argument("--text-field", default="text", help="JSONL field holding the text (default: text)")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument(
        "--skip-bad", action="store_true", help="leave out (and list) documents that cannot be windowed"
    )
    parser.add_argument(
        "--devices", nargs="+", metavar="DEV", help="encode in one process per device, e.g. cuda:0 cuda:1"
    )
    parser.add_argument("--processes", type=positive_int, metavar="N", help="encode in N CPU processes")
    parser.add_argument("--device", help="torch device, e.g. cpu or cuda:0")


def _add_build_command(actions) -> None:
    build = actions.add_parser("build", help="encode a corpus into a new index directory")
    _corpus_arguments(build)
    build.add_argument("-o", "--output", required=True, metavar="DIR", help="index directory to create")
    build.add_argument("-m", "--model", help="model id or path (default: the shipped slice-minilm; 'base': MiniLM)")
    build.add_argument("--min-span", type=positive_int)
    build.add_argument("--max-span", type=positive_int)
    build.add_argument("--unit", choices=("word", "token"))
    build.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="unit vectors' precision")
    build.add_argument("--calibration", metavar="FILE", help="a calibration JSON to store with the index")
    build.add_argument("--force", action="store_true", help="replace an index already in DIR")
    add_ray_argument(build, "encode")
    build.add_argument("--gpus-per-worker", type=float, default=0, metavar="G", help="with --ray: GPUs per actor")
    build.add_argument("--shard-mb", type=positive_int, metavar="MB", help="with --ray: MB of text per shard (16)")
    add_backend_arguments(build)
    build.set_defaults(handler=_build)


def _documents(args):
    from slice_st.data.corpus import read_corpus

    fmt = None if args.input_format == "auto" else args.input_format
    documents = read_corpus(
        expand_inputs(args.corpus, follow_links=args.follow_links),
        split=args.split,
        fmt=fmt,
        id_field=args.id_field,
        text_field=args.text_field,
        report=lambda path, mode: _say_paragraphs(args, path) if mode == "paragraph" else None,
    )
    if not documents:
        raise UsageError(f"no documents in {', '.join(args.corpus)} (all empty?).")
    return documents


def _summary(verb: str, documents, index, seconds: float, args) -> None:
    skipped = {doc_id for doc_id, _ in index.skipped}
    documents = [d for d in documents if d.id not in skipped]
    words = sum(len(d.text.split()) for d in documents)
    rate = len(documents) / seconds if seconds > 0 else float("inf")
    if args.format != "text":
        summary = {
            "action": verb,
            "documents": len(documents),
            "words": words,
            "seconds": round(seconds, 3),
            "documents_per_second": round(rate, 3),
            "index_documents": len(index),
            "index_units": index.num_units,
            "skipped": sorted(skipped),
        }
        sys.stdout.write(dumps_json(summary, ensure_ascii=False, indent=1 if args.format == "json" else None) + "\n")
        return
    report(
        args,
        f"{verb} {len(documents)} documents ({words} words) in {seconds:.1f} s: {rate:.1f} documents/s, "
        f"{words / seconds if seconds > 0 else float('inf'):.0f} words/s; the index holds {len(index)} documents, "
        f"{index.num_units} units",
    )


def _build(args) -> int:
    import slice_st
    from slice_st.index import SpanIndex
    from slice_st.index.storage import MANIFEST, check_index_target

    if args.ray is not None:
        return _build_on_ray(args)
    given = [option for option, value in (("--workers", args.workers), ("--gpus-per-worker", args.gpus_per_worker),
                                          ("--shard-mb", args.shard_mb)) if value]  # fmt: skip
    if given:
        raise UsageError(f"{given[0]} is an option of --ray.")
    if args.input_format == "parquet" or any(path.lower().endswith(".parquet") for path in args.corpus):
        raise UsageError("Parquet corpora are read with --ray (pip install 'slice-st[ray]').")
    check_index_target(args.output)  # a file, or no write permission: said now, not after encoding
    if os.path.exists(os.path.join(args.output, MANIFEST)) and not args.force:
        raise UsageError(f"{args.output} already holds an index: use `slice-st index add`, or --force to replace it.")
    quiet_progress(args)
    documents = _documents(args)
    model = slice_st.load_model(args.model, device=args.device, **model_options(args))
    start = time.perf_counter()
    index = SpanIndex.build(
        documents,
        model,
        min_span=args.min_span,
        max_span=args.max_span,
        unit=args.unit,
        dtype=args.dtype,
        batch_size=args.batch_size,
        show_progress_bar=not args.no_progress,
        on_error="skip" if args.skip_bad else "raise",
        devices=args.devices,
        processes=args.processes,
    )
    report_skipped(index.skipped, "documents")
    seconds = time.perf_counter() - start
    if args.calibration:
        index.set_calibration(args.calibration)
    index.save(args.output, overwrite=args.force, timeout=None)
    _summary("indexed", documents, index, seconds, args)
    if args.format == "text":
        report(args, f"saved to {args.output}")
    return 0


def _build_on_ray(args) -> int:
    """``index build --ray``: :meth:`SpanIndex.from_files` with ``engine="ray"``; a rerun resumes."""
    import slice_st
    from slice_st.index import SpanIndex
    from slice_st.index.ray_engine import check_address, require_ray
    from slice_st.index.storage import MANIFEST, check_index_target, read_shard_list

    if args.devices or args.processes:
        raise UsageError("--devices/--processes are for a one-machine build; with --ray use --workers.")
    if args.calibration:
        raise UsageError("--calibration is not stored by a --ray build; fit it on one shard with `index calibrate`.")
    if args.gpus_per_worker < 0:
        raise UsageError(f"--gpus-per-worker must be >= 0, got {args.gpus_per_worker}.")
    address = check_address(args.ray)
    require_ray()  # the missing extra is said before the model loads
    check_index_target(args.output)
    previous = read_shard_list(args.output) if os.path.isdir(args.output) else None
    if not args.force and (os.path.exists(os.path.join(args.output, MANIFEST)) or (previous or {}).get("complete")):
        raise UsageError(f"{args.output} already holds an index: use another folder, or --force to rebuild it.")
    if previous is not None and not args.force:
        report(args, f"resuming the build in {args.output}", sys.stderr)
    quiet_progress(args)
    model = slice_st.load_model(args.model, device=args.device, **model_options(args))

    def progress(group: dict) -> None:
        if not args.no_progress:
            report(
                args,
                f"group {group['group']}: {len(group['shards'])} shards, {group['documents']} documents, "
                f"{group['units']} units ({group['built']} built, {group['reused']} already there)",
                sys.stderr,
            )

    result = SpanIndex.from_files(
        args.corpus,
        model,
        split=args.split,
        fmt=None if args.input_format == "auto" else args.input_format,
        id_field=args.id_field,
        text_field=args.text_field,
        engine="ray",
        output=args.output,
        address=address,
        concurrency=args.workers,
        num_gpus=args.gpus_per_worker,
        shard_bytes=None if args.shard_mb is None else args.shard_mb << 20,
        force=args.force,
        min_span=args.min_span,
        max_span=args.max_span,
        unit=args.unit,
        dtype=args.dtype,
        batch_size=args.batch_size,
        on_error="skip" if args.skip_bad else "raise",
        progress=progress,
    )
    report_skipped(result.skipped, "documents")
    seconds = result.seconds
    report(
        args,
        f"indexed {result.documents} documents ({result.units} units) on Ray in {seconds:.1f} s: {len(result.shards)} "
        f"shards ({result.shards_built} built, {result.shards_reused} already there), "
        f"{result.units / seconds if seconds > 0 else float('inf'):.0f} units/s; saved to {args.output}",
    )
    return 0


def _waiting(directory: str):
    def report(holder: str) -> None:
        sys.stderr.write(
            f"slice-st: {directory} is being changed by another process ({holder}); waiting for it to finish\n"
        )
        sys.stderr.flush()

    return report


def _update(directory: str, **model_options):
    """``SpanIndex.open_for_update``: the writer lock held from load to save, waiting (with a message)."""
    from slice_st.index import SpanIndex

    return SpanIndex.open_for_update(directory, timeout=None, on_wait=_waiting(directory), **model_options)


def _add(args) -> int:
    from slice_st.index.storage import check_index_target, read_manifest

    read_manifest(args.directory, must_exist=True)  # not an index, or read-only: said before any file is read
    check_index_target(args.directory)
    quiet_progress(args)
    documents = _documents(args)
    with _update(args.directory, device=args.device, **model_options(args)) as index:
        start = time.perf_counter()
        index.add(
            documents,
            batch_size=args.batch_size,
            show_progress_bar=not args.no_progress,
            on_error="skip" if args.skip_bad else "raise",
            devices=args.devices,
            processes=args.processes,
        )
        report_skipped(index.skipped, "documents")
        seconds = time.perf_counter() - start
    _summary("added", documents, index, seconds, args)
    return 0


def _remove(args) -> int:
    with _update(args.directory) as index:
        removed = index.remove(args.ids)
    report(args, f"removed {removed} documents; the index holds {len(index)} documents")
    return 0


def _merge(args) -> int:
    from slice_st.index import SpanIndex

    merged = SpanIndex.merge_saved(args.shards, args.output, force=args.force, on_wait=_waiting(args.output))
    report(
        args, f"merged {len(args.shards)} shards: {len(merged)} documents, {merged.num_units} units in {args.output}"
    )
    return 0


def _info(args) -> int:
    from slice_st.index import SpanIndex

    sys.stdout.write(dumps_json(SpanIndex.describe(args.directory, verify=args.verify), indent=2) + "\n")
    return 0


def _calibrate(args) -> int:
    from slice_st.index.calibration import fit_sts_calibration

    if args.save_json:
        check_output(args.save_json)
    with _update(args.directory) as index:
        calibration = fit_sts_calibration(index.model, args.sts, args.pair_score, limit=args.limit)
        index.set_calibration(calibration)
    if args.save_json:
        calibration.save(args.save_json)
    report(
        args,
        f"calibrated on {calibration.pairs} pairs of {calibration.source} ({calibration.pair_score} cosine, "
        f"Spearman {calibration.spearman}); {len(calibration.x)} thresholds stored with {args.directory}",
    )
    return 0


def _candidates(args) -> int:
    start = time.perf_counter()
    with _update(args.directory) as index:
        index.build_candidates(args.kind, args.chunk, args.stride, args.nlist, args.nprobe, args.candidates)
    report(
        args, f"candidate stage built in {time.perf_counter() - start:.1f} s: {dumps_json(index.info()['candidates'])}"
    )
    return 0


def _say_paragraphs(args, path: str) -> None:
    """``--split auto`` read ``path`` as wrapped text: say so (one document per line is what a plain file gives)."""
    report(args, f"{path}: --split auto reads one document per paragraph (its lines are wrapped)", sys.stderr)
