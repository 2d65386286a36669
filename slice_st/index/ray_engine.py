"""The index built on Ray (:func:`build_on_ray`): Ray Data actors save shards of about ``shard_bytes`` of text by the
one-process build, ``DIR/shards.json`` holds the plan, a rerun resumes (docs/guides/ray.md); the Ray connection."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slice_st._checks import check_top_k
from slice_st._extras import needs_extra
from slice_st.config import SpanConfig
from slice_st.data.corpus import Document, documents_from_dataset, read_corpus
from slice_st.encode import token_dimension
from slice_st.errors import FileAccessError, SpanInputError
from slice_st.files import check_output, is_jsonl
from slice_st.index import storage
from slice_st.index.compressed import (
    CODEBOOK_ARRAYS,
    CompressedTier,
    CompressionSpec,
    sample_rows,
)
from slice_st.index.encoding import texts_and_ids
from slice_st.index.ray_cluster import claim_workers, connect_ray, require_ray, user_error
from slice_st.loading import model_fingerprint, model_identity

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from slice_st.index.base import ShardBuilder

#: Text per shard (UTF-8 bytes): 16 MiB of text is about 3M words, a ~2.5 GB shard at float16 with d=384, K=20.
DEFAULT_SHARD_BYTES = 16 << 20
#: Hidden folder of the groups already written (ignored by :func:`slice_st.index.storage.shard_directories`).
BUILD_STATE = ".slice-st-build"
#: In the build state: a compressed build's codebooks, trained once (every shard is coded with them).
CODEBOOKS_FILE = "codebooks.json"


@dataclasses.dataclass
class RayBuild:
    """What :func:`build_on_ray` did: the index folder, its shards (in order) and the counts of this run.

    Args:
        path: The index folder.
        shards: Its shard folders, in order.
        documents: Documents indexed.
        units: Units indexed.
        groups: Work groups of the corpus.
        groups_built: Groups built by this run.
        shards_built: Shards written by this run.
        shards_reused: Shards kept from an earlier run.
        seconds: Wall time.
        skipped: ``(document id, reason)`` of documents left out.
        worker_seconds: Seconds the actors spent on this run's groups, summed (``seconds`` less start-up and waits).
        compression: The shards' compressed tier (``"pq48,norms4"``…), ``None``: exact only.
        shards_coded: Shards this run coded with the build's codebooks (the others already were).
    """

    path: str
    shards: list[str]
    documents: int
    units: int
    groups: int
    groups_built: int
    shards_built: int
    shards_reused: int
    seconds: float
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    worker_seconds: float = 0.0
    compression: str | None = None
    shards_coded: int = 0


def corpus_files(paths: str | Sequence[str], fmt: str | None = None) -> list[dict[str, Any]]:
    """``{"path", "format", "bytes"}`` of every corpus file (local or a ``pyarrow.fs`` URI), in order: files as given,
    folders' files sorted (hidden ones left out); a missing path is a ``FileNotFoundError``."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if fmt not in (None, "text", "jsonl", "parquet"):
        raise SpanInputError(f"fmt must be one of text, jsonl, parquet or None, got {fmt!r}.")
    found: list[dict[str, Any]] = []
    for path in map(os.fspath, paths):
        if "://" in path:
            found += _remote_files(path, fmt)
        elif os.path.isdir(path):
            for folder, subfolders, names in os.walk(path):
                subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
                found += [
                    _file(os.path.join(folder, name), fmt)
                    for name in sorted(names)
                    if not name.startswith(".")
                ]
        elif os.path.isfile(path):
            found.append(_file(path, fmt))
        else:
            raise FileNotFoundError(f"corpus path not found: {path}")
    if not found:
        raise SpanInputError(f"no corpus files in {', '.join(map(os.fspath, paths))}.")
    real = {}
    for file in found:
        key = file["path"] if "://" in file["path"] else os.path.realpath(file["path"])
        if key in real:
            raise SpanInputError(f"{real[key]} and {file['path']} are the same file: give it once.")
        real[key] = file["path"]
    return found


def _file(path: str, fmt: str | None, size: int | None = None) -> dict[str, Any]:
    """One corpus file as the plan records it, its format by its name unless ``fmt`` is given."""
    fmt = fmt or (
        "jsonl" if is_jsonl(path) else "parquet" if path.lower().endswith(".parquet") else "text"
    )
    return {"path": path, "format": fmt, "bytes": os.path.getsize(path) if size is None else size}


def _remote_files(uri: str, fmt: str | None) -> list[dict[str, Any]]:
    with needs_extra("ray", "reading a corpus from a URI"):
        from pyarrow import fs as fs_module
    try:
        filesystem, root = fs_module.FileSystem.from_uri(uri)
        info = filesystem.get_file_info(root)
    except (OSError, ValueError) as error:
        raise FileAccessError(f"cannot open the corpus at {uri}: {error}") from None
    if info.type == fs_module.FileType.NotFound:
        raise FileNotFoundError(f"corpus path not found: {uri}")
    if info.type == fs_module.FileType.File:
        return [_file(uri, fmt, int(info.size))]
    entries = filesystem.get_file_info(fs_module.FileSelector(root, recursive=True))
    # a local folder's order (os.walk): a folder's files, then its subfolders
    entries.sort(key=lambda e: [(1, part) for part in e.path.split("/")[:-1]] + [(0, e.base_name)])
    return [
        _file(f"{uri.split('://', 1)[0]}://{e.path}", fmt, int(e.size))
        for e in entries
        if e.type == fs_module.FileType.File
        and not any(part.startswith(".") for part in e.path[len(root) :].split("/"))
    ]


def read_file_documents(
    file: dict[str, Any], split: str, id_field: str, text_field: str
) -> list[Document]:
    """One corpus file's documents (``{"path", "format"}``) as :func:`read_corpus` reads them; URIs fetched first."""
    path, fmt = file["path"], file["format"]

    def read(local: str) -> list[Document]:
        if fmt != "parquet":
            return read_corpus(
                [local], split=split, fmt=fmt, id_field=id_field, text_field=text_field
            )
        columns = [text_field] + ([id_field] if id_field else [])
        with needs_extra("ray", "reading Parquet"):
            from pyarrow import parquet
        try:
            table = parquet.read_table(local, columns=columns)
        except (OSError, ValueError, KeyError) as error:
            why = " ".join(str(error).split())[:200]
            raise SpanInputError(
                f"{path}: cannot read the Parquet columns {columns}: {why}"
            ) from None
        try:
            documents = documents_from_dataset(table.to_pylist(), text_field, id_field)
        except ValueError as error:
            raise SpanInputError(f"{path}: {str(error).removeprefix('list, ')}") from None
        return [dataclasses.replace(d, source=path) for d in documents]

    if "://" not in path:
        return read(path)
    with needs_extra("ray", "reading a corpus from a URI"):
        from pyarrow import fs
    filesystem, remote = fs.FileSystem.from_uri(path)
    with tempfile.TemporaryDirectory(
        prefix="slice-st-corpus-", ignore_cleanup_errors=True
    ) as folder:
        with (
            filesystem.open_input_stream(remote) as source,
            open(os.path.join(folder, "file"), "wb") as target,
        ):
            shutil.copyfileobj(source, target, 1 << 22)
        documents = read(target.name)
    # the ids and sources name the URI, not the temporary copy
    return [
        dataclasses.replace(d, source=path, id=f"{path}:{d.line}" if fmt == "text" else d.id)
        for d in documents
    ]


def _groups(sizes: Sequence[int], shard_bytes: int) -> list[list[int]]:
    """Consecutive items whose sizes add up to about ``shard_bytes`` (an item never split; a big one alone)."""
    groups: list[list[int]] = []
    total = 0
    for position, size in enumerate(sizes):
        if not groups or total + size > shard_bytes:
            groups.append([])
            total = 0
        groups[-1].append(position)
        total += size
    return groups


def _chunks(documents: list[Document], shard_bytes: int) -> list[list[Document]]:
    """Documents cut into shards of about ``shard_bytes`` of UTF-8 text, in order: by the byte each one starts at."""
    starts = itertools.accumulate((len(d.text.encode("utf-8")) for d in documents), initial=0)
    chunks = itertools.groupby(zip(documents, starts), key=lambda pair: pair[1] // shard_bytes)
    return [[document for document, _ in chunk] for _, chunk in chunks]


class _ShardWriter:
    """A Ray Data actor: reads a group of files (or takes its documents), builds and saves its shards."""

    def __init__(self, job: dict[str, Any]) -> None:
        torch.set_num_threads(max(1, int(job["num_cpus"])))
        if torch.cuda.is_available():  # an actor given a GPU sees it (and only it) as cuda:0
            job["model"].to("cuda")
        self.job = job
        self.fingerprint = model_fingerprint(job["model"])

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        return {
            "result": [json.dumps(self.write_group(json.loads(work))) for work in batch["work"]]
        }

    def write_group(self, work: dict[str, Any]) -> dict[str, Any]:
        start, job = time.perf_counter(), self.job
        if work.get("documents") is not None:
            documents = [Document(doc_id, text) for doc_id, text in work["documents"]]
        else:
            documents = [
                d for file in work["files"] for d in read_file_documents(file, **job["reading"])
            ]
        state = {"group": work["group"], "shards": [], "documents": 0, "units": 0, "skipped": []}
        built = reused = 0
        for number, chunk in enumerate(_chunks(documents, job["shard_bytes"])):
            name = f"part-{work['group']:05d}-{number:04d}"
            folder = os.path.join(job["output"], name)
            manifest = storage.read_manifest(folder, must_exist=False)
            if (
                manifest is not None
                and not job["force"]
                and manifest["model_fingerprint"] == self.fingerprint
            ):
                reused += 1
                units, kept = manifest["units"], manifest["documents"]
            else:
                try:
                    ids = [d.id for d in chunk]
                    index = job["index_class"].build(
                        [d.text for d in chunk], job["model"], ids, **job["build"]
                    )
                except SpanInputError as error:
                    # on_error="skip" left every document of the shard out
                    if job["build"]["on_error"] != "skip" or not str(error).startswith(
                        "No document could be indexed"
                    ):
                        raise
                    why = f"(a shard of documents that cannot be windowed): {error}"
                    state["skipped"] += [(d.id, f"Document {d.id!r} {why}") for d in chunk]
                    continue
                index.save(folder, timeout=0)
                built += 1
                units, kept = index.num_units, len(index)
                state["skipped"] += index.skipped
                if job["on_shard"] is not None:
                    job["on_shard"](name)
            state["units"] += units
            state["documents"] += kept
            state["shards"].append(name)
        storage.write_json(
            os.path.join(job["output"], BUILD_STATE, f"group-{work['group']:05d}.json"), state
        )
        return state | {"built": built, "reused": reused, "seconds": time.perf_counter() - start}


def _finish(
    output: str,
    plan: dict[str, Any],
    ordered: list[dict[str, Any]],
    groups_built: int,
    start: float,
    coded: int = 0,
) -> RayBuild:
    """Write the shard list of a finished build and say what it did."""
    shards = [name for state in ordered for name in state["shards"]]
    if not shards:
        raise SpanInputError(
            "No document could be indexed: the corpus is empty (or every document was skipped)."
        )
    total = {
        key: sum(state.get(key, 0) for state in ordered)
        for key in ("documents", "units", "built", "reused")
    }
    summary = {
        "complete": True,
        "shards": shards,
        "documents": total["documents"],
        "units": total["units"],
    }
    storage.write_json(os.path.join(output, storage.SHARD_LIST), plan | summary)
    return RayBuild(
        path=os.fspath(output),
        shards=shards,
        documents=total["documents"],
        units=total["units"],
        groups=len(ordered),
        groups_built=groups_built,
        shards_built=total["built"],
        shards_reused=total["reused"],
        seconds=time.perf_counter() - start,
        skipped=[tuple(pair) for state in ordered for pair in state.get("skipped", [])],
        worker_seconds=sum(state.get("seconds", 0.0) for state in ordered),
        compression=plan["compression"],
        shards_coded=coded,
    )


def build_on_ray(
    index_class: ShardBuilder,
    model: SentenceTransformer,
    span_config: SpanConfig,
    *,
    output: str | os.PathLike | None = None,
    files: str | Sequence[str] | None = None,
    texts: Any = None,
    ids: Sequence[str] | None = None,
    dtype: str = "float32",
    batch_size: int = 32,
    on_error: str = "raise",
    split: str = "line",
    fmt: str | None = None,
    text_field: str = "text",
    id_field: str | None = "id",
    address: str | None = None,
    concurrency: int | None = None,
    num_gpus: float = 0,
    num_cpus: float = 1,
    shard_bytes: int | None = None,
    force: bool = False,
    progress: Callable[[dict[str, Any]], None] | None = None,
    on_shard: Callable[[str], None] | None = None,
    compression: str | None = None,
    show_progress_bar: bool | None = None,  # the actors show none
    devices: Sequence[str] | None = None,
    processes: int | None = None,
    pool: Any = None,
) -> RayBuild:
    """Build a sharded index in ``output`` on Ray from corpus ``files`` (read by the workers) or in-memory ``texts``:
    ``SpanIndex.build(..., engine="ray")``, whose arguments these are; ``index_class`` builds and saves each shard.

    ``concurrency`` actors (default: as many as fit) of ``num_cpus`` CPUs and ``num_gpus`` GPUs; ``shard_bytes`` of
    text per shard (default 16 MiB). With ``compression`` (e.g. ``"pq48"``) a second stage trains one set of codebooks
    on a sample of all the shards' units, stored in the build state, and codes every shard with them (shards already
    coded with them are kept). A rerun resumes; ``force`` rebuilds every shard (and retrains the codebooks).
    ``progress(group_result)`` is called on the driver as each group finishes, ``on_shard(name)`` in the actor after
    each shard is built and saved. Returns a :class:`RayBuild`.
    """
    shard_bytes = shard_bytes or DEFAULT_SHARD_BYTES
    given = (output, files, texts, ids, shard_bytes, concurrency, num_gpus, num_cpus, on_error)
    _check_options(*given, devices, processes, pool)
    output = check_output(output, "index folder")
    spec = (
        None if compression is None else CompressionSpec.parse(compression, token_dimension(model))
    )
    work, source = _work(files, texts, ids, fmt, shard_bytes, text_field, id_field)
    settings = (span_config, dtype, shard_bytes, spec)
    plan, done = _start(output, model, *settings, source, len(work), force)
    todo = [item for item in work if item["group"] not in done]
    start = time.perf_counter()
    results = {
        number: state | {"built": 0, "reused": len(state["shards"])}
        for number, state in done.items()
    }
    with contextlib.ExitStack() as session:  # Ray connected once, when there is work for it
        connect = lambda: session.enter_context(_connected(address))  # noqa: E731
        if todo:
            connect()
            job: dict[str, Any] = {"index_class": index_class, "model": model}
            job["output"] = os.path.abspath(output)
            job |= {"num_cpus": num_cpus, "shard_bytes": shard_bytes, "force": force}
            job |= {"on_shard": on_shard, "build": dict(batch_size=batch_size, on_error=on_error)}
            job["reading"] = {"split": split, "id_field": id_field, "text_field": text_field}
            job["build"] |= {"dtype": dtype, "show_progress_bar": False} | span_config.to_dict()
            results |= _run(todo, job, concurrency, num_gpus, progress)
        ordered = [results[number] for number in range(len(work))]
        names = [name for state in ordered for name in state["shards"]]
        coded = 0
        if spec is not None and names:
            coded = _compress_shards(index_class, model, output, names, spec, num_cpus, connect)
    return _finish(output, plan, ordered, len(todo), start, coded)


@contextlib.contextmanager
def _connected(address: str | None):
    """Ray connected at ``address`` (or started here) for the block; stopped after it when started here."""
    started = connect_ray(address)
    try:
        yield
    finally:
        if started:
            require_ray().shutdown()


def _check_options(
    output, files, texts, ids, shard_bytes, concurrency, num_gpus, num_cpus, on_error, *local
) -> None:
    if output is None:
        raise SpanInputError("engine='ray' writes a sharded index: give output= (a folder).")
    if any(option is not None for option in local):
        raise SpanInputError(
            "devices, processes and pool are for engine='local'; on Ray use concurrency=, num_gpus=."
        )
    if (files is None) == (texts is None):
        raise SpanInputError("build_on_ray needs either files or texts.")
    if files is not None and ids is not None:
        raise SpanInputError(
            "ids are for in-memory texts; files carry their own ids (path:line, or the id field)."
        )
    check_top_k(shard_bytes, "shard_bytes")
    check_top_k(concurrency, "concurrency", optional=True)
    if not isinstance(num_gpus, (int, float)) or isinstance(num_gpus, bool) or num_gpus < 0:
        raise SpanInputError(f"num_gpus must be a number >= 0, got {num_gpus!r}.")
    if not isinstance(num_cpus, (int, float)) or isinstance(num_cpus, bool) or num_cpus <= 0:
        raise SpanInputError(f"num_cpus must be a number > 0, got {num_cpus!r}.")
    if on_error not in ("raise", "skip"):
        raise SpanInputError(f"on_error must be 'raise' or 'skip', got {on_error!r}.")


def _work(files, texts, ids, fmt, shard_bytes: int, text_field: str, id_field: str | None):
    """The numbered work groups (corpus files the workers read, or in-memory documents) and the plan's corpus."""
    if files is not None:
        found = corpus_files(files, fmt)
        items, key, sizes, source = found, "files", [f["bytes"] for f in found], {"files": found}
    else:
        text_list, ids = texts_and_ids(texts, ids, text_field, id_field)
        items, key = list(zip(ids, text_list)), "documents"
        sizes = [len(text.encode("utf-8")) for text in text_list]
        source = {
            "documents": len(items),
            "bytes": int(sum(sizes)),
            "first": ids[0],
            "last": ids[-1],
        }
    return [
        {"group": n, key: [items[i] for i in group]}
        for n, group in enumerate(_groups(sizes, shard_bytes))
    ], source


def _start(
    output: str,
    model: SentenceTransformer,
    span_config,
    dtype,
    shard_bytes,
    spec: CompressionSpec | None,
    source,
    groups: int,
    force: bool,
):
    """Check that ``output`` holds no other build (unless ``force``), write the plan; the plan and the groups done."""
    name, path = model_identity(model)
    plan = {
        "format_version": 1,
        "engine": "ray",
        "complete": False,
        "model_fingerprint": model_fingerprint(model),
        "model_name": name,
        "model_path": path,
        "span_config": span_config.to_dict(),
        "dtype": dtype,
        "shard_bytes": shard_bytes,
        "compression": None if spec is None else str(spec),
        "source": source,
    }
    previous = storage.read_shard_list(output)
    if previous is None and os.path.exists(os.path.join(output, storage.MANIFEST)) and not force:
        raise SpanInputError(
            f"{output} already holds a (single) index: use another folder, or force=True (--force) to replace it."
        )
    names = [("model_fingerprint", "model"), ("span_config", "span settings"), ("dtype", "dtype")]
    names.append(("compression", "compression"))
    for key, what in (*names, ("shard_bytes", "shard size"), ("source", "corpus")):
        if previous is not None and not force and previous.get(key) != plan[key]:
            raise SpanInputError(
                f"{output} holds a sharded build with another {what} "
                f"({previous.get(key) if key != 'source' else 'other files or sizes'}; "
                f"now {plan[key] if key != 'source' else 'these'}): resume it with the same model, settings and "
                f"corpus, use another folder, or force=True (--force) to rebuild it."
            )
    folder = os.path.join(output, BUILD_STATE)
    if os.path.islink(folder) or (os.path.exists(folder) and not os.path.isdir(folder)):
        raise SpanInputError(
            f"{folder} is a {'symbolic link' if os.path.islink(folder) else 'file'}, not the build state "
            "this index wrote: remove it (nothing outside the index folder is followed or deleted)."
        )
    os.makedirs(folder, exist_ok=True)
    # only the files this build wrote: regular files, links removed as links, never followed
    if force:
        for entry in os.scandir(folder):
            if re.fullmatch(r"group-\d+\.json|codebooks\.json", entry.name) and not entry.is_dir(
                follow_symlinks=False
            ):
                os.unlink(entry.path)
    storage.write_json(os.path.join(output, storage.SHARD_LIST), plan)
    done = {}
    for number in range(0 if force else groups):
        try:  # a regular file, never read through a link
            state = json.loads(
                storage.read_bytes(os.path.join(output, BUILD_STATE, f"group-{number:05d}.json"))
            )
        except (OSError, ValueError):
            continue  # missing, a link or unreadable: rebuilt by the rerun
        shards = state.get("shards", []) if isinstance(state, dict) else None
        if isinstance(shards, list) and all(
            storage.is_plain_name(name)
            and os.path.exists(os.path.join(output, name, storage.MANIFEST))
            for name in shards
        ):
            done[number] = state
    return plan, done


def _run(
    todo, job: dict[str, Any], concurrency, num_gpus: float, progress
) -> dict[int, dict[str, Any]]:
    """Build the groups still to do on a pool of actors (Ray connected); ``{group: result}`` as they finish."""
    ray = require_ray()
    model, device = job["model"], job["model"].device
    try:
        workers = claim_workers(concurrency, len(todo), job["num_cpus"], num_gpus)
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        # Ray Data's INFO lines ("Starting execution of Dataset …")
        for name in ("ray.data", "ray.data._internal"):
            logging.getLogger(name).setLevel(logging.WARNING)
        model.to("cpu")  # shipped to the actors (each moves it to its GPU, if it has one)
        dataset = ray.data.from_items(
            [{"work": json.dumps(item)} for item in todo], override_num_blocks=len(todo)
        )
        dataset = dataset.map_batches(
            _ShardWriter,
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(min_size=1, max_size=workers),
            num_cpus=job["num_cpus"],
            num_gpus=num_gpus or None,
            fn_constructor_kwargs={"job": job},
        )
        results, failure = {}, None
        rows = iter(dataset.iter_rows())
        try:
            for row in rows:
                state = json.loads(row["result"])
                results[state["group"]] = state
                if progress is not None:
                    progress(state)
        except ray.exceptions.RayError as error:
            # a worker's own error, e.g. a document that cannot be windowed
            failure = user_error(error)
            if failure is error:
                raise
        finally:
            # stops the actors at once when the driver stops early
            getattr(rows, "close", lambda: None)()
            del rows, dataset
        # raised outside the handler: nothing of the failed run stays reachable from it
        if failure is not None:
            raise failure
        return results
    finally:
        model.to(device)


def _compress_shards(
    index_class: ShardBuilder,
    model: SentenceTransformer,
    output: str,
    names: list[str],
    spec: CompressionSpec,
    num_cpus: float,
    connect: Callable[[], Any],
) -> int:
    """The compression stage: every shard coded with one set of codebooks, those of the build state (else trained on
    a sample of all the shards' units and stored there first); shards already coded with them are kept, the others
    coded on Ray (``connect()`` connects it). Returns how many shards were coded."""
    folders = [os.path.join(output, name) for name in names]
    manifests = [storage.read_manifest(folder, must_exist=True) or {} for folder in folders]
    tier = _stored_codebooks(output, spec)
    if tier is None:
        tier = _train_codebooks(index_class, model, folders, manifests, spec)
        _store_codebooks(output, tier)
    digest = tier.codebook_digest()
    todo = [
        folder
        for folder, manifest in zip(folders, manifests)
        if (manifest.get("compression") or {}).get("codebooks") != digest
    ]
    if todo:
        connect()
        _code_shards(index_class, model, todo, tier, num_cpus)
    return len(todo)


def _train_codebooks(
    index_class: ShardBuilder, model, folders: list[str], manifests: list[dict[str, Any]], spec
) -> CompressedTier:
    """Codebooks trained on the units :meth:`CompressedTier.train` would sample from the shards laid end to end (the
    one index they make), each shard's rows read from its memory map: never more than the sample in memory."""
    bases = np.cumsum([0] + [int(manifest["units"]) for manifest in manifests])
    rows = sample_rows(int(bases[-1]))
    vectors, norms = [], []
    for folder, lo, hi in zip(folders, bases[:-1], bases[1:]):
        mine = rows[(rows >= lo) & (rows < hi)] - lo
        if len(mine):
            shard = index_class.load(folder, model, mmap=True)
            vectors.append(np.asarray(shard.arrays["unit_vectors"][mine], dtype=np.float32))
            norms.append(np.asarray(shard.arrays["span_norms"][mine], dtype=np.float32))
            del shard
    return CompressedTier.trained(np.concatenate(vectors), np.concatenate(norms), spec, bases[-1])


def _store_codebooks(output: str, tier: CompressedTier) -> None:
    """Write the codebooks to the build state (one JSON file, replaced atomically)."""
    arrays = {}
    for name, values in tier.codebook_arrays().items():
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(values), allow_pickle=False)
        arrays[name] = base64.b64encode(buffer.getvalue()).decode("ascii")
    stored = {"spec": str(tier.spec), "codebooks": tier.codebook_digest(), "arrays": arrays}
    storage.write_json(os.path.join(output, BUILD_STATE, CODEBOOKS_FILE), stored, indent=0)


def _stored_codebooks(output: str, spec: CompressionSpec) -> CompressedTier | None:
    """The codebooks of the build state, if it holds whole ones of ``spec`` (else ``None``: trained again)."""
    try:  # a regular file, never read through a link
        stored = json.loads(storage.read_bytes(os.path.join(output, BUILD_STATE, CODEBOOKS_FILE)))
        arrays = {
            name: np.load(io.BytesIO(base64.b64decode(stored["arrays"][name])), allow_pickle=False)
            for name in CODEBOOK_ARRAYS
        }
        tier = CompressedTier.from_codebooks(spec, arrays)
        if stored["spec"] != str(spec) or stored["codebooks"] != tier.codebook_digest():
            return None
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None  # missing, a link, or unreadable
    return tier


def _code_shard(index_class, folder: str, model, tier: CompressedTier, num_cpus: float) -> None:
    """A Ray task: the shard in ``folder`` coded with ``tier``'s codebooks and saved."""
    torch.set_num_threads(max(1, int(num_cpus)))
    shard = index_class.load(folder, model, mmap=True)
    shard.compress(codebooks=tier)
    shard.save(folder, timeout=0)


def _code_shards(index_class, model, folders: list[str], tier: CompressedTier, num_cpus: float):
    """Code the shards in ``folders`` with ``tier``'s codebooks, one Ray task each (Ray connected)."""
    ray = require_ray()
    device, failure = model.device, None
    model.to("cpu")  # shipped to the tasks
    try:
        task = ray.remote(_code_shard).options(num_cpus=num_cpus)
        model_ref, tier_ref = ray.put(model), ray.put(tier)
        pending = [task.remote(index_class, f, model_ref, tier_ref, num_cpus) for f in folders]
        try:
            ray.get(pending)
        except ray.exceptions.RayError as error:
            failure = user_error(error)
            if failure is error:
                raise
    finally:
        model.to(device)
    if failure is not None:  # raised outside the handler: nothing of the failed run stays reachable
        raise failure
