"""Documents into index arrays: inputs to (texts, ids), multi-process encoding, the empty and concatenated arrays."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slice_st._checks import as_text_list, check_device, check_top_k
from slice_st.backends import backend_of, check_parallelism
from slice_st.config import SpanConfig
from slice_st.data.corpus import Document, documents_from_dataset
from slice_st.errors import SpanInputError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


def empty_arrays(dim: int, span_config: SpanConfig, dtype: str) -> dict[str, np.ndarray]:
    """An index's arrays holding nothing: unit rows (vectors, character offsets in the document, span norms), and
    per segment its unit offsets (one more than segments), document and first unit in that document."""
    return {
        "unit_vectors": np.zeros((0, dim), dtype=dtype),
        "unit_chars": np.zeros((0, 2), dtype=np.int32),
        "span_norms": np.zeros((0, span_config.max_span - span_config.min_span + 1), dtype=dtype),
        "segment_units": np.zeros(1, dtype=np.int64),
        "segment_docs": np.zeros(0, dtype=np.int64),
        "segment_first_unit": np.zeros(0, dtype=np.int64),
    }


def offsets_of(lengths: Any) -> np.ndarray:
    """Where consecutive runs of ``lengths`` start, then where the last ends: ``[0, l0, l0 + l1, …]`` (int64)."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def concat_parts(
    parts: list[dict[str, np.ndarray]], doc_bases: Sequence[int]
) -> dict[str, np.ndarray]:
    """One set of arrays from several, in order: segment unit offsets shifted, document numbers by ``doc_bases``
    (the unit vectors and span norms only where every part holds them: an index without its exact tier has none)."""
    unit_bases = np.cumsum([0] + [len(p["unit_chars"]) for p in parts])[:-1]
    names = ("unit_vectors", "unit_chars", "span_norms", "segment_first_unit")
    out = {
        name: np.concatenate([np.asarray(p[name]) for p in parts])
        for name in names
        if all(name in p for p in parts)
    }
    if "unit_vectors" in out:
        # span norms in the unit vectors' dtype (an index saved before they were float16 keeps float32 ones)
        out["span_norms"] = out["span_norms"].astype(out["unit_vectors"].dtype, copy=False)
    out["segment_units"] = np.concatenate(
        [[0]] + [np.asarray(p["segment_units"][1:]) + base for p, base in zip(parts, unit_bases)]
    ).astype(np.int64)
    out["segment_docs"] = np.concatenate(
        [np.asarray(p["segment_docs"]) + base for p, base in zip(parts, doc_bases)]
    ).astype(np.int64)
    return out


def texts_and_ids(
    texts: Any,
    ids: Sequence[str] | None,
    text_field: str,
    id_field: str | None,
    taken: Sequence[str] = (),
) -> tuple[list[str], list[str]]:
    """Texts (strings, :class:`Document` s or a ``datasets.Dataset``; at least one) and their ids: ``ids``, the
    documents' own, or the next numbers free of ``taken``; checked (non-empty strings, unique, new, one per text)."""
    given = None
    if hasattr(texts, "column_names") and hasattr(texts, "features"):  # a datasets.Dataset
        documents = documents_from_dataset(texts, text_field, id_field)
        texts = [d.text for d in documents]
        given = [d.id for d in documents] if id_field is not None else None
    elif isinstance(texts, Iterable) and not isinstance(texts, (str, bytes, dict)):
        texts = list(texts)
        if texts and all(isinstance(item, Document) for item in texts):
            texts, given = [d.text for d in texts], [d.id for d in texts]
    texts = as_text_list(texts)[0] if given is None else texts
    if not texts:
        raise SpanInputError("No documents to add: the corpus is empty.")
    ids, seen = ids if ids is not None else given, set(taken)
    if ids is None:  # the next free numbers from len(taken) on
        ids = [
            str(n) for n in range(len(taken), 2 * len(taken) + len(texts)) if str(n) not in seen
        ][: len(texts)]
    ids = list(ids)
    if len(ids) != len(texts):
        raise SpanInputError(f"Got {len(ids)} ids for {len(texts)} documents.")
    for position, doc_id in enumerate(ids):
        if not isinstance(doc_id, str) or not doc_id:
            raise SpanInputError(
                f"Document id at position {position} must be a non-empty string, got {doc_id!r}."
            )
        if doc_id in seen:
            raise SpanInputError(f"Duplicate document id {doc_id!r}.")
        seen.add(doc_id)
    return texts, ids


def pool_devices(
    devices: Sequence[str] | None, processes: int | None, pool: dict[str, Any] | None
) -> list[str] | None:
    """Validate the multi-process options: the devices of a pool to start (``None``: no pool to start)."""
    if pool is not None:
        if devices is not None or processes is not None:
            raise SpanInputError("Give either pool or devices/processes, not both.")
        if not isinstance(pool, dict) or not pool.get("processes"):
            raise SpanInputError("pool must be a pool from model.start_multi_process_pool(...).")
        return None
    check_top_k(processes, "processes", optional=True)
    cpu_processes = (
        processes if devices is None else sum(1 for d in devices if str(d).startswith("cpu"))
    )
    if cpu_processes:
        try:
            check_parallelism(cpu_processes, "processes")
        except ValueError as error:
            raise SpanInputError(f"{error} Each process loads its own copy of the model.") from None
    if devices is None:
        return None if processes in (None, 1) else ["cpu"] * processes
    if (
        isinstance(devices, str)
        or not all(isinstance(d, str) and d for d in devices)
        or not len(devices)
    ):
        raise SpanInputError(
            f"devices must be a non-empty list of device names such as ['cuda:0', 'cuda:1'], got {devices!r}."
        )
    if processes is not None and processes != len(devices):
        raise SpanInputError(
            f"processes ({processes}) does not match the {len(devices)} devices given; give one or the other."
        )
    for name in devices:
        check_device(name)  # a SpanInputError
    return list(devices)


class PooledEncoder:
    """The model as ``encode_windows`` sees it, with ``encode`` running in a sentence-transformers pool (public API:
    ``model.encode(..., pool=pool)`` passes ``output_value=None`` and ``processing_kwargs`` on to the workers)."""

    def __init__(self, model: SentenceTransformer, pool: dict[str, Any]) -> None:
        self._model, self._pool = model, pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __getitem__(self, item):
        return self._model[item]

    def encode(self, inputs, **kwargs):
        return self._model.encode(inputs, pool=self._pool, **kwargs)


@contextmanager
def encoder_for(model: SentenceTransformer, targets: list[str] | None, pool: dict[str, Any] | None):
    """Yield what encodes the windows: the model, or the model through a given pool or one started here (stopped on
    exit, the model moved back to its device; CPU workers get ``cores / workers`` threads each)."""
    if targets is None and pool is None:
        yield model
        return
    if backend_of(model) != "torch":
        raise SpanInputError(
            f"Multi-process encoding needs the torch backend; a model on {backend_of(model)} uses its threads "
            "instead (load_model(..., threads=N))."
        )
    if pool is not None:
        yield PooledEncoder(model, pool)
        return
    device = model.device
    cpu_workers = sum(1 for target in targets if torch.device(target).type == "cpu")
    threads = os.environ.get("OMP_NUM_THREADS")
    if cpu_workers:  # read by the spawned workers' torch at start-up
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // cpu_workers))
    try:
        started = model.start_multi_process_pool(targets)
    finally:
        if threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = threads
    try:
        yield PooledEncoder(model, started)
    finally:
        model.stop_multi_process_pool(started)
        model.to(device)
