"""``slice-st index …`` and ``slice-st mine --index``: the command line over :class:`slice_st.SpanIndex`.

slice-st index build calls/*.txt tickets.jsonl -o runs/corpus-index
slice-st index add runs/corpus-index new_calls.txt
slice-st index info runs/corpus-index
slice-st index merge shard-*/ -o runs/corpus-index      # shards built in parallel processes
slice-st index calibrate runs/corpus-index --sts DATA/stsbenchmark/sts-train.csv
slice-st mine --index runs/corpus-index --query "my bag was lost" --top-k 5
slice-st index build big.jsonl -o runs/big --processes 2           # or --devices cuda:0 cuda:1
slice-st mine --index runs/shards --query "my bag was lost"        # a directory of shards, searched together
slice-st index build calls/ -o runs/calls --ray --workers 2        # on Ray (here; --ray=auto: a cluster), resumable
slice-st mine --index runs/calls --query "my bag was lost" --ray   # its shards scanned on Ray actors
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from slice_st.cli.common import (
    add_backend_arguments,
    add_format_argument,
    add_query_arguments,
    add_ray_argument,
    check_output,
    dumps_json,
    expand_inputs,
    model_options,
    positive_int,
    quiet_progress,
    read_queries,
    report,
    result_counts,
    terminal_safe,
    write_rows,
)
from slice_st.text import SPLITS


def _corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "corpus",
        nargs="+",
        metavar="CORPUS",
        help="text files (one document per line/paragraph), JSONL files, folders (their .txt/.md/.rst/.jsonl files, "
        "recursively) or glob patterns",
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="auto",
        help="what a document of a text file is: a line, a paragraph, or auto (default: paragraphs when the file's "
        "lines are hard-wrapped, else lines)",
    )
    add_format_argument(parser, formats=("text", "json", "jsonl"))
    parser.add_argument(
        "--input-format",
        choices=("auto", "text", "jsonl", "parquet"),
        default="auto",
        help="auto: .jsonl/.ndjson files are JSONL, .parquet Parquet (with --ray)",
    )
    parser.add_argument(
        "--follow-links", action="store_true", help="also read file links leading out of a folder or pattern named"
    )
    parser.add_argument("--id-field", default="id", help="JSONL field holding the document id (default: id)")
    parser.add_argument("--text-field", default="text", help="JSONL field holding the text (default: text)")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--skip-bad",
        action="store_true",
        help="leave out (and list) documents the model cannot window instead of failing",
    )
    parser.add_argument(
        "--devices",
        nargs="+",
        metavar="DEV",
        default=None,
        help="encode in one process per device, e.g. --devices cuda:0 cuda:1, or cpu cpu (sentence-transformers' pool)",
    )
    parser.add_argument("--processes", type=positive_int, default=None, metavar="N", help="encode in N CPU processes")


def add_index_command(commands) -> None:
    """Register ``slice-st index {build,add,remove,info,calibrate,candidates}`` on the top-level subparsers."""
    index = commands.add_parser(
        "index", help="build and maintain a corpus SpanIndex", description=__doc__.splitlines()[0]
    )
    actions = index.add_subparsers(dest="index_command", required=True)

    search = actions.add_parser(
        "search",
        help="search a saved index (the same options and output as mine --index)",
        description="For each query, the index's best-matching spans, best first (as slice-st mine --index).",
    )
    search.add_argument(
        "index",
        nargs="+",
        metavar="DIR",
        help="an index directory (several, or a directory of indexes: shards searched together)",
    )
    search.add_argument(
        "-m", "--model", default=None, help="model id or path (default: the one the index was built with)"
    )
    search.add_argument("--approximate", action="store_true", help="use the index's FAISS candidate stage")
    add_query_arguments(search)
    add_ray_argument(search, "scan the shards")
    add_backend_arguments(search)
    search.set_defaults(handler=_search, files=[])

    build = actions.add_parser("build", help="encode a corpus into a new index directory")
    _corpus_arguments(build)
    build.add_argument("-o", "--output", required=True, metavar="DIR", help="index directory to create")
    build.add_argument(
        "-m",
        "--model",
        default=None,
        help='model id or path (default: the shipped slice-minilm; "base" for plain all-MiniLM-L6-v2)',
    )
    build.add_argument("--min-span", type=positive_int, default=None)
    build.add_argument("--max-span", type=positive_int, default=None)
    build.add_argument("--unit", choices=("word", "token"), default=None)
    build.add_argument(
        "--dtype",
        choices=("float32", "float16"),
        default="float32",
        help="unit vectors (float16: half the memory, scores ±1e-3)",
    )
    build.add_argument("--calibration", metavar="FILE", default=None, help="a calibration JSON to store with the index")
    build.add_argument("--device", default=None)
    build.add_argument("--force", action="store_true", help="replace an index already in DIR")
    add_ray_argument(build, "encode")
    build.add_argument(
        "--gpus-per-worker", type=float, default=0, metavar="G", help="with --ray: GPUs per actor (e.g. 1, or 0.5)"
    )
    build.add_argument(
        "--shard-mb",
        type=positive_int,
        default=None,
        metavar="MB",
        help="with --ray: MB of corpus text per shard (default 16); CORPUS may be folders, Parquet, s3://… URIs",
    )
    add_backend_arguments(build)
    build.set_defaults(handler=_build)

    add = actions.add_parser("add", help="append documents to an index (saved atomically)")
    add.add_argument("directory", metavar="DIR")
    _corpus_arguments(add)
    add.add_argument("--device", default=None)
    add.add_argument("--threads", type=positive_int, default=None, help="intra-op threads of the forward pass")
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
    info.add_argument(
        "--verify", action="store_true", help="also load the index and check every file's SHA-256 against the manifest"
    )
    info.set_defaults(handler=_info)

    calibrate = actions.add_parser("calibrate", help="fit cosine → STS 0–5 (isotonic) and store it with the index")
    calibrate.add_argument("directory", metavar="DIR")
    calibrate.add_argument("--sts", required=True, metavar="TSV", help="an STS-benchmark file, e.g. sts-train.csv")
    calibrate.add_argument("--pair-score", choices=("sentence", "best_span"), default="sentence")
    calibrate.add_argument("--limit", type=positive_int, default=None, help="use the first N pairs")
    calibrate.add_argument("--save-json", metavar="FILE", default=None, help="also write the calibration JSON here")
    calibrate.set_defaults(handler=_calibrate)

    candidates = actions.add_parser("candidates", help="build the FAISS candidate stage (for mine --approximate)")
    candidates.add_argument("directory", metavar="DIR")
    candidates.add_argument("--kind", choices=("ivf", "flat"), default="ivf")
    candidates.add_argument("--chunk", type=positive_int, default=4)
    candidates.add_argument("--stride", type=positive_int, default=2)
    candidates.add_argument("--nlist", type=positive_int, default=None)
    candidates.add_argument("--nprobe", type=positive_int, default=128)
    candidates.add_argument("--candidates", type=positive_int, default=512)
    candidates.set_defaults(handler=_candidates)


def _documents(args):
    from slice_st.data.corpus import read_corpus

    fmt = None if args.input_format == "auto" else args.input_format
    documents = read_corpus(
        expand_inputs(args.corpus, follow_links=args.follow_links),
        split=args.split,
        fmt=fmt,
        id_field=args.id_field,
        text_field=args.text_field,
        report=lambda path, mode: report(args, f"{path}: --split auto reads one document per {mode}", sys.stderr),
    )
    if not documents:
        raise ValueError(f"no documents in {', '.join(args.corpus)} (all empty?).")
    return documents


def _report(verb: str, documents, index, seconds: float, args) -> None:
    skipped = {doc_id for doc_id, _ in index.skipped}
    documents = [d for d in documents if d.id not in skipped]
    words = sum(len(d.text.split()) for d in documents)
    rate = len(documents) / seconds if seconds > 0 else float("inf")
    if getattr(args, "format", "text") != "text":
        summary = {
            "action": verb,
            "documents": len(documents),
            "words": words,
            "seconds": round(seconds, 3),
            "documents_per_second": round(rate, 3),
            "index_documents": len(index),
            "index_units": index.num_units,
            "skipped": [doc_id for doc_id, _ in index.skipped],
        }
        sys.stdout.write(dumps_json(summary, ensure_ascii=False, indent=1 if args.format == "json" else None) + "\n")
        return
    report(
        args,
        f"{verb} {len(documents)} documents ({words} words) in {seconds:.1f} s: {rate:.1f} documents/s, "
        f"{words / seconds if seconds > 0 else float('inf'):.0f} words/s; the index holds {len(index)} documents, "
        f"{index.num_units} units",
    )


def _report_skipped(index) -> None:
    for doc_id, reason in index.skipped:
        sys.stderr.write(f"slice-st: skipped {terminal_safe(doc_id)}: {terminal_safe(reason)}\n")
    if index.skipped:
        sys.stderr.write(f"slice-st: {len(index.skipped)} documents skipped\n")


def _build(args) -> int:
    import slice_st
    from slice_st.index import SpanIndex
    from slice_st.index.storage import MANIFEST, check_index_target

    if args.ray is not None:
        return _build_on_ray(args)
    for option, given in (
        ("--workers", args.workers),
        ("--gpus-per-worker", args.gpus_per_worker),
        ("--shard-mb", args.shard_mb),
    ):
        if given:
            raise ValueError(f"{option} is an option of --ray.")
    if args.input_format == "parquet" or any(path.lower().endswith(".parquet") for path in args.corpus):
        raise ValueError("Parquet corpora are read with --ray (pip install 'slice-st[ray]').")
    check_index_target(args.output)  # a file, or no write permission: said now, not after encoding
    if os.path.exists(os.path.join(args.output, MANIFEST)) and not args.force:
        raise ValueError(f"{args.output} already holds an index: use `slice-st index add`, or --force to replace it.")
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
    _report_skipped(index)
    seconds = time.perf_counter() - start
    if args.calibration:
        index.set_calibration(args.calibration)
    index.save(args.output, overwrite=args.force, timeout=None)
    _report("indexed", documents, index, seconds, args)
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
        raise ValueError(
            "--devices/--processes are for a one-machine build; with --ray use --workers and --gpus-per-worker."
        )
    if args.calibration:
        raise ValueError(
            "--calibration is not stored by a --ray build; fit it on one shard with `slice-st index calibrate`."
        )
    if args.gpus_per_worker < 0:
        raise ValueError(f"--gpus-per-worker must be >= 0, got {args.gpus_per_worker}.")
    address = check_address(args.ray)
    require_ray()  # the missing extra is said before the model loads
    check_index_target(args.output)
    previous = read_shard_list(args.output) if os.path.isdir(args.output) else None
    if not args.force and (os.path.exists(os.path.join(args.output, MANIFEST)) or (previous or {}).get("complete")):
        raise ValueError(f"{args.output} already holds an index: use another folder, or --force to rebuild it.")
    if previous is not None and not previous.get("complete") and not args.force:
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
    for doc_id, reason in result.skipped:
        sys.stderr.write(f"slice-st: skipped {terminal_safe(doc_id)}: {terminal_safe(reason)}\n")
    seconds = result.seconds
    report(
        args,
        f"indexed {result.documents} documents ({result.units} units) on Ray in {seconds:.1f} s: "
        f"{len(result.shards)} shards "
        f"({result.shards_built} built, {result.shards_reused} already there), "
        f"{result.units / seconds if seconds > 0 else float('inf'):.0f} units/s; saved to {args.output}",
    )
    return 0


def _model_for(directory: str, model_name: str | None = None, device: str | None = None, options: dict | None = None):
    """The model to open ``directory`` with: ``None`` (the index's recorded one, on its recorded backend and
    exported file) unless a name, a device or backend ``options`` are given."""
    import slice_st
    from slice_st.index.fingerprint import model_source
    from slice_st.index.storage import read_manifest

    options = dict(options or {})
    if not (model_name or device or options):
        return None
    manifest = read_manifest(directory, must_exist=True)
    recorded = manifest.get("model_backend", "torch")
    if recorded != "torch" and "backend" not in options and not model_name:  # built on ONNX Runtime / OpenVINO
        options.update(backend=recorded, model_file=options.get("model_file") or manifest.get("model_file"))
    return slice_st.load_model(model_name or model_source(directory, manifest), device=device, **options)


def _load(directory: str, model_name: str | None = None, device: str | None = None, options: dict | None = None):
    from slice_st.index import SpanIndex

    return SpanIndex.load(directory, _model_for(directory, model_name, device, options))


def _waiting(directory: str):
    def report(holder: str) -> None:
        sys.stderr.write(
            f"slice-st: {directory} is being changed by another process ({holder}); waiting for it to finish\n"
        )
        sys.stderr.flush()

    return report


def _update(directory: str, device: str | None = None, options: dict | None = None):
    """``SpanIndex.open_for_update``: the writer lock held from load to save, waiting (with a message) for another
    writer."""
    from slice_st.index import SpanIndex
    from slice_st.index.storage import check_index_target, read_manifest

    read_manifest(directory, must_exist=True)  # not an index: said before anything else
    check_index_target(directory)  # read-only: said before the model loads
    return SpanIndex.open_for_update(
        directory, _model_for(directory, None, device, options), timeout=None, on_wait=_waiting(directory)
    )


def _open_for_search(
    paths,
    model_name: str | None = None,
    device: str | None = None,
    options: dict | None = None,
    ray: str | None = None,
    workers: int | None = None,
):
    """``mine --index``: one index, or a :class:`ShardedSpanIndex` over several (repeated ``--index``, or a directory
    of shards);
    with ``ray`` (an address, or ``"local"``) a :class:`RayShardedSpanIndex` (close it)."""
    from slice_st.index import ShardedSpanIndex, SpanIndex
    from slice_st.index.storage import shard_directories

    if ray is not None:
        from slice_st.index.ray_engine import check_address, require_ray

        check_address(ray)
        require_ray()
    directories = shard_directories(paths if isinstance(paths, (list, tuple)) else [paths])
    first = _load(directories[0], model_name, device, options)
    shards = [first] + [SpanIndex.load(path, first.model) for path in directories[1:]]
    if ray is not None:
        from slice_st.index.ray_search import RayShardedSpanIndex

        return RayShardedSpanIndex(shards, directories, address=ray, workers=workers)
    return shards[0] if len(shards) == 1 else ShardedSpanIndex(shards)


def _indexed_files(doc_ids) -> dict[str, str]:
    """Real path → the spelling it was indexed under, for ids ``<path>:<line>`` whose file still exists."""
    spellings: dict[str, str] = {}
    seen: set[str] = set()
    for doc_id in doc_ids:
        path, _, line = doc_id.rpartition(":")
        if path and line.isdigit() and path not in seen:
            seen.add(path)
            if os.path.isfile(path):
                spellings.setdefault(os.path.realpath(path), path)
    return spellings


def _check_not_indexed_yet(index, documents) -> None:
    """Refuse a file already indexed under another spelling of its path (``a.txt`` vs ``/abs/a.txt``, a link)."""
    sources = {
        d.source for d in documents if d.source and d.source != "-" and d.id == f"{os.path.normpath(d.source)}:{d.line}"
    }
    if not sources:
        return
    indexed = _indexed_files(index.doc_ids)
    for source in sorted(sources):
        spelling = indexed.get(os.path.realpath(source))
        if spelling is not None and os.path.normpath(spelling) != os.path.normpath(source):
            raise ValueError(
                f"{source} is already in the index as {spelling} (the same file): remove those documents first, "
                "or give the file as it was indexed."
            )


def _add(args) -> int:
    quiet_progress(args)
    documents = _documents(args)
    from slice_st.backends import set_torch_threads

    threads = set_torch_threads(args.threads)
    with _update(args.directory, args.device, {"threads": threads}) as index:
        _check_not_indexed_yet(index, documents)
        start = time.perf_counter()
        index.add(
            documents,
            batch_size=args.batch_size,
            show_progress_bar=not args.no_progress,
            on_error="skip" if args.skip_bad else "raise",
            devices=args.devices,
            processes=args.processes,
        )
        _report_skipped(index)
        seconds = time.perf_counter() - start
    _report("added", documents, index, seconds, args)
    return 0


def _remove(args) -> int:
    with _update(args.directory) as index:
        removed = index.remove(args.ids)
    report(args, f"removed {removed} documents; the index holds {len(index)} documents")
    return 0


def _merge(args) -> int:
    from slice_st.index import SpanIndex
    from slice_st.index.storage import MANIFEST, check_index_target, index_lock

    check_index_target(args.output)
    if os.path.exists(os.path.join(args.output, MANIFEST)) and not args.force and args.output not in args.shards:
        raise ValueError(f"{args.output} already holds an index: use --force to replace it.")
    with index_lock(args.output, timeout=None, on_wait=_waiting(args.output)):  # from reading the shards to the commit
        first = _load(args.shards[0])
        shards = [first] + [SpanIndex.load(path, first.model) for path in args.shards[1:]]
        merged = SpanIndex.merge(shards)
        merged.model_name, merged.model_path = first.model_name, first.model_path
        merged.save(args.output)
    report(args, f"merged {len(shards)} shards: {len(merged)} documents, {merged.num_units} units in {args.output}")
    return 0


def _info(args) -> int:
    from slice_st.index.storage import read_manifest

    manifest = read_manifest(args.directory, must_exist=True)
    info = {key: value for key, value in manifest.items() if key not in ("span_config", "files", "samples")}
    units = max(int(info.get("units") or 0), 1)
    array_bytes = info.get("array_bytes") or 0
    info["bytes_per_unit"] = round(array_bytes / units, 1)
    info["smaller_than_materialised"] = round((info.get("materialised_span_bytes") or 0) / max(array_bytes, 1), 1)
    if getattr(args, "verify", False):
        from slice_st.index import SpanIndex

        SpanIndex.load(args.directory, _model_for(args.directory), verify=True)  # raises on any mismatch
        info["verified"] = True
    sys.stdout.write(dumps_json(info, indent=2) + "\n")
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


INDEX_FIELDS = ["query", "rank", "score", "cosine", "scorer", "calibrated", "doc_id", "start", "end", "span"]


def _best_documents(
    index, queries: list[str], texts: int, per_text: int | None, spans: int | None, options: dict
) -> list[list]:
    """The spans of each query's ``texts`` best documents (``per_text`` each), at most ``spans`` in all.

    The search asks for ``texts × per_text`` spans (at most ``per_text`` per document), and for 4 times more
    while the best documents could still have more spans to show; the first ``texts`` documents of a
    ranking are always the ``texts`` best, whatever the number asked.
    """
    cap = max(len(index), 1) * (per_text or 1)
    first = min(texts * (per_text or 1), cap)
    results = []
    for query, matches in zip(
        queries, index.search(queries, top_k=first, **options)
    ):  # one batch; more only where needed
        asked = first
        while True:
            best = list(dict.fromkeys(match.doc_id for match in matches))[:texts]
            kept = [match for match in matches if match.doc_id in set(best)]
            complete = per_text is not None and len(kept) >= len(best) * per_text and len(best) == texts
            if complete or len(matches) < asked or asked >= cap:
                break
            asked = min(asked * 4, cap)
            matches = index.search([query], top_k=asked, **options)[0]
        results.append(kept[:spans] if spans else kept)
    return results


def _search(args) -> int:
    """``slice-st index search DIR…``: :func:`mine_index` with the directories as positional arguments."""
    args.index = args.index if isinstance(args.index, list) else [args.index]
    return mine_index(args)


def mine_index(args) -> int:
    """``slice-st mine --index DIR``: search a saved index; same output formats as ``mine``."""
    if args.files:
        raise ValueError("give either FILEs or --index DIR, not both.")
    quiet_progress(args)
    queries = read_queries(args)
    index = _open_for_search(
        args.index,
        args.model,
        args.device,
        model_options(args),
        getattr(args, "ray", None),
        getattr(args, "workers", None),
    )
    try:
        return _search_and_write(index, queries, args)
    finally:
        if hasattr(index, "close"):
            index.close()


def _search_and_write(index, queries, args) -> int:
    if args.unit is not None and args.unit != index.span_config.unit:
        raise ValueError(
            f"--unit {args.unit}: this index holds {index.span_config.unit} spans (the unit is fixed when "
            f"the index is built: `slice-st index build --unit {args.unit}`)."
        )
    from slice_st.scoring import resolve_scorer

    texts, per_text, spans = result_counts(args, index=True)
    scorer = resolve_scorer(getattr(args, "scorer", None))
    options = {
        "threshold": args.threshold,
        "min_span": args.min_span,
        "max_span": args.max_span,
        "batch_size": args.batch_size,
        "approximate": getattr(args, "approximate", False),
        "per_document": per_text,
        "scorer": scorer,
        "overlap": getattr(args, "overlap", False),
    }
    if texts is None:
        results = index.search(queries, top_k=spans or max(len(index), 1) * (per_text or 1), **options)
    else:
        results = _best_documents(index, queries, texts, per_text, spans, options)
    rows = []
    for query, matches in zip(queries, results):
        for rank, match in enumerate(matches, start=1):
            rows.append(
                {
                    "query": query,
                    "rank": rank,
                    "score": round(match.score, 6),
                    "cosine": round(match.cosine, 6),
                    "scorer": scorer.name,
                    "calibrated": match.calibrated,
                    "doc_id": match.doc_id,
                    "start": match.start,
                    "end": match.end,
                    "span": match.span,
                    "where": os.path.basename(match.doc_id),
                    "text": index.texts[match.doc_index],
                }
            )
    fields = INDEX_FIELDS if index.calibration is not None else [f for f in INDEX_FIELDS if f != "calibrated"]
    write_rows(rows, fields, args, sys.stdout)
    return 0
