"""``SpanIndex``: exact span search over a corpus without storing a vector per span.

A SLICE span vector is the mean of its token vectors, so its cosine to a query ``q`` is
``q · S / ‖S‖`` with ``S`` the sum of the span's unit sums. The index stores, per unit (word or
token), the **sum of its token vectors** (``d`` numbers) and, per span starting at that unit, the
**norm of the span's sum** (``K`` scalars). A search is one matmul ``units @ q`` (N dot products per
query), a float64 prefix sum of those scalars, and one subtraction and division per span: exact,
with ``d + K`` numbers per unit instead of the ``K · d`` of materialised span vectors. The scan is
:func:`slice_st.spans.top_spans_flat` (torch), run over the memory-mapped arrays without a copy;
:class:`ShardedSpanIndex` runs it over several indexes (shards) and merges their top-k.

Long documents are stored as their model windows (segments): a span's numbers all come from the
one window that owns it, exactly as in :func:`slice_st.encode_spans`. Prefix sums are float64 and
reset per block of units, so a 20k-word document scores as exactly as a sentence.

On disk an index is a directory: ``manifest.json`` names a data folder ``data-<n>/`` holding the
arrays (``.npy``, memory-mapped on load). A save writes a new data folder and then replaces the
manifest atomically, so a crash never leaves a half index that loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from slice_st.config import SpanConfig
from slice_st.data.corpus import Document
from slice_st.encode import (
    check_threshold,
    embed_texts,
    encode_windows,
    model_window,
    resolve_prompt,
    resolve_span_config,
    token_dimension,
)
from slice_st.errors import FileAccessError, IndexConflictError, SpanInputError
from slice_st.index.calibration import CALIBRATION_FILE, Calibration
from slice_st.index.candidates import CandidateStage
from slice_st.index.encoding import char_offsets, concat_parts, empty_arrays, encoder_for, pool_devices, texts_and_ids
from slice_st.index.fingerprint import model_identity, model_runtime, model_source
from slice_st.index.search import (
    IndexMatch,
    as_tensor,
    cached_unit_flags,
    check_overlap,
    check_search,
    index_unit_flags,
    query_list,
    ranked,
    rerank_matches,
    search_scorer,
    span_costs_for,
)
from slice_st.index.storage import (
    ARRAYS,
    DATA_MARKER,
    INDEX_FORMAT_VERSION,
    MANIFEST,
    SETTINGS_FILE,
    array_digest,
    check_index_target,
    file_digest,
    folder_entry,
    fsync_directory,
    index_lock,
    load_array,
    new_data_directory,
    read_bytes,
    read_consistent,
    read_manifest,
    remove_old_data,
    save_array,
    write_bytes,
    write_manifest,
)
from slice_st.loading import model_fingerprint
from slice_st.spans import span_sum_norms, top_spans_flat, unit_peak_scores, unit_sums
from slice_st.text import open_folder
from slice_st.tokens import WINDOW_CONTEXT, plan_windows

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from slice_st.index.ray_engine import RayBuild
    from slice_st.scoring import SpanScorer

#: Units scored per block: bounds the (block, Q) float64 buffers and resets the prefix sums.
SEARCH_BLOCK_UNITS = 1 << 16
#: Float64 scores held per block, (queries × span lengths × units): sets the block size for many queries.
SEARCH_SCORE_BUFFER = 1 << 21
#: Documents encoded per step of :meth:`SpanIndex.add` (the progress bar moves per step).
DOCUMENTS_PER_STEP = 256


class SpanIndex:
    """Exact top-k span search over a corpus, with ``d + K`` stored numbers per unit.

    Args:
        model: The ``SentenceTransformer`` that encodes documents and queries.
        span_config: The spans the index holds (:class:`~slice_st.config.SpanConfig`).
        dtype: ``"float32"`` or ``"float16"`` stored unit vectors.

    Note:
        Build one with :meth:`SpanIndex.build`, :meth:`SpanIndex.from_files` or :meth:`SpanIndex.load`; the constructor
        makes an empty index.

    Example:
        >>> from slice_st import SpanIndex, load_model
        >>> documents = ["A man played the guitar on stage.", "The flight was late."]
        >>> index = SpanIndex.build(documents, load_model(), max_span=5)
        >>> [(m.doc_id, m.span) for m in index.search("plays the guitar", top_k=1)[0]]
        [('0', 'played the guitar')]
    """

    def __init__(self, model: SentenceTransformer, span_config: SpanConfig, dtype: str = "float32") -> None:
        if dtype not in ("float32", "float16"):
            raise SpanInputError(f"dtype must be 'float32' or 'float16', got {dtype!r}.")
        self.model = model
        self.span_config = span_config
        self.dtype = dtype
        self.fingerprint = model_fingerprint(model)
        self.model_name, self.model_path = model_identity(model)
        self.model_runtime = model_runtime(model)  # {} on torch; else the backend and exported file
        self.doc_ids: list[str] = []
        self.texts: list[str] = []
        self.calibration: Calibration | None = None
        self.skipped: list[tuple[str, str]] = []  # (id, reason) of documents the last add(on_error="skip") left out
        self._candidates: CandidateStage | None = None
        self._origin: tuple[str, str, int | None] | None = (
            None  # (directory, data folder, generation) it was loaded from
        )
        self._arrays = empty_arrays(
            token_dimension(model), span_config.max_span - span_config.min_span + 1, np.dtype(dtype)
        )

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        texts: Iterable[str] | Iterable[Document] | Any,
        model: SentenceTransformer | None = None,
        ids: Sequence[str] | None = None,
        *,
        min_span: int | None = None,
        max_span: int | None = None,
        unit: str | None = None,
        dtype: str = "float32",
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        text_field: str = "text",
        id_field: str | None = "id",
        on_error: str = "raise",
        devices: Sequence[str] | None = None,
        processes: int | None = None,
        pool: dict[str, Any] | None = None,
        engine: str = "local",
        output: str | os.PathLike | None = None,
        address: str | None = None,
        concurrency: int | None = None,
        num_gpus: float = 0,
        shard_bytes: int | None = None,
        force: bool = False,
    ) -> SpanIndex | RayBuild:
        """Encode ``texts`` (one forward pass each, long ones windowed) into a new index.

        ``texts`` is an iterable of strings, of :class:`slice_st.data.corpus.Document` (see
        :func:`slice_st.data.corpus.read_corpus` for text and JSONL files), or a ``datasets.Dataset``
        (columns ``text_field`` and ``id_field``). ``ids`` default to ``"0"``, ``"1"``, …; they must
        be unique strings. Span settings default to the model's (see :func:`slice_st.get_span_config`);
        searches may use any sub-range of them. ``dtype="float16"`` halves the unit vectors (scores
        then differ from float32 by about 1e-3 and near-ties may swap; span norms stay float32).

        Encoding can run in several processes through sentence-transformers' multi-process pool:
        ``devices=["cuda:0", "cuda:1"]`` (one process per entry; ``["cpu", "cpu"]`` for CPU
        processes), ``processes=N`` (N CPU processes), or ``pool=`` a pool you started with
        ``model.start_multi_process_pool(...)`` (reused, not stopped). The index is the same as a
        one-process build (to float tolerance: batches are padded differently).

        >>> from slice_st import SpanIndex, load_model
        >>> index = SpanIndex.build(["The flight was late.", "My bag was lost."] * 8, load_model(),  # doctest: +SKIP
        ...     processes=2)

        ``engine="ray"`` builds on Ray instead (the extra ``slice-st[ray]``): the documents are cut into
        shards of about ``shard_bytes`` of text, encoded by ``concurrency`` actors (``num_gpus`` each) of
        the cluster at ``address`` (``None``: Ray started here) and saved as a sharded index in
        ``output``; returns a :class:`slice_st.index.ray_engine.RayBuild` (open the index with
        :class:`ShardedSpanIndex` or :class:`slice_st.index.ray_search.RayShardedSpanIndex`). A rerun
        resumes (shards already saved are skipped; ``force=True`` rebuilds). Same index as this
        one-process build, shard by shard (:meth:`from_files` reads files on the workers).

        >>> SpanIndex.build(texts, load_model(), engine="ray", output="runs/ray-index", concurrency=2)  # doctest: +SKIP
        """
        from slice_st.loading import load_model

        model = _as_model(model) if model is not None else load_model()
        span_config = resolve_span_config(model, min_span, max_span, unit)
        if engine != "local":
            return cls._build_elsewhere(
                engine,
                output,
                model,
                span_config,
                texts=texts,
                ids=ids,
                dtype=dtype,
                batch_size=batch_size,
                on_error=on_error,
                text_field=text_field,
                id_field=id_field,
                address=address,
                concurrency=concurrency,
                num_gpus=num_gpus,
                shard_bytes=shard_bytes,
                force=force,
                local=(devices, processes, pool),
            )
        if output is not None or address is not None or concurrency is not None:
            raise SpanInputError(
                "output, address and concurrency are options of engine='ray'; the local build returns the index "
                "(save it)."
            )
        index = cls(model, span_config, dtype)
        index.add(
            texts,
            ids,
            batch_size=batch_size,
            show_progress_bar=show_progress_bar,
            text_field=text_field,
            id_field=id_field,
            on_error=on_error,
            devices=devices,
            processes=processes,
            pool=pool,
        )
        return index

    @classmethod
    def from_files(
        cls,
        paths: str | Sequence[str],
        model: SentenceTransformer | None = None,
        *,
        split: str = "line",
        fmt: str | None = None,
        id_field: str = "id",
        text_field: str = "text",
        **options,
    ) -> SpanIndex | RayBuild:
        """Build from text files (one document per line/paragraph, id ``path:line``) or JSONL files (id and text
        fields).

        With ``engine="ray"`` (see :meth:`build`) the Ray workers read the files (also Parquet, and
        ``pyarrow.fs`` URIs such as ``s3://bucket/corpus/``; a folder stands for its files).

        >>> SpanIndex.from_files(["calls/"], engine="ray", output="runs/calls-index", address="auto")  # doctest: +SKIP
        """
        from slice_st.data.corpus import read_corpus

        if options.get("engine", "local") != "local":  # the workers read the files
            from slice_st.loading import load_model

            model = _as_model(model) if model is not None else load_model()
            span_config = resolve_span_config(
                model, options.pop("min_span", None), options.pop("max_span", None), options.pop("unit", None)
            )
            options.pop("show_progress_bar", None)
            engine, output = options.pop("engine"), options.pop("output", None)
            local = tuple(options.pop(name, None) for name in ("devices", "processes", "pool"))
            return cls._build_elsewhere(
                engine,
                output,
                model,
                span_config,
                files=paths,
                split=split,
                fmt=fmt,
                id_field=id_field,
                text_field=text_field,
                local=local,
                **options,
            )
        documents = read_corpus(paths, split=split, fmt=fmt, id_field=id_field, text_field=text_field)
        return cls.build(documents, model, **options)

    @classmethod
    def _build_elsewhere(
        cls,
        engine: str,
        output,
        model,
        span_config: SpanConfig,
        *,
        local: tuple,
        shard_bytes: int | None = None,
        **options,
    ) -> RayBuild:
        """``engine="ray"``: :func:`slice_st.index.ray_engine.build_on_ray`, each shard built by this class."""
        if engine != "ray":
            raise SpanInputError(f"engine must be 'local' or 'ray', got {engine!r}.")
        if output is None:
            raise SpanInputError("engine='ray' writes a sharded index: give output= (a folder).")
        if any(value is not None for value in local):
            raise SpanInputError(
                "devices, processes and pool are for engine='local'; on Ray use concurrency= and num_gpus=."
            )
        from slice_st.index.ray_engine import DEFAULT_SHARD_BYTES, build_on_ray

        return build_on_ray(cls, output, model, span_config, shard_bytes=shard_bytes or DEFAULT_SHARD_BYTES, **options)

    def add(
        self,
        texts: Iterable[str] | Iterable[Document] | Any,
        ids: Sequence[str] | None = None,
        *,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        text_field: str = "text",
        id_field: str | None = "id",
        on_error: str = "raise",
        devices: Sequence[str] | None = None,
        processes: int | None = None,
        pool: dict[str, Any] | None = None,
    ) -> list[str]:
        """Append documents (same inputs as :meth:`build`); returns their ids. On any error the index is left as it was.

        ``devices``/``processes``/``pool`` encode in several processes, as in :meth:`build`.

        ``on_error="skip"`` leaves out documents the model cannot window (a span of ``max_span``
        words longer than a model window, e.g. runs of dot leaders) instead of failing the whole
        batch; they are listed in ``self.skipped`` as ``(id, reason)``.
        """
        if on_error not in ("raise", "skip"):
            raise SpanInputError(f"on_error must be 'raise' or 'skip', got {on_error!r}.")
        targets = pool_devices(devices, processes, pool)
        _check_not_indexed_yet(self.doc_ids, texts if isinstance(texts, list) else [])
        text_list, given_ids = texts_and_ids(texts, text_field, id_field)
        if ids is None:
            ids = given_ids
        if not text_list:
            raise SpanInputError("No documents to add: the corpus is empty.")
        if ids is None:
            start = len(self.doc_ids)
            existing = set(self.doc_ids)
            ids = []
            number = start
            for _ in text_list:
                while str(number) in existing:
                    number += 1
                ids.append(str(number))
                number += 1
        ids = list(ids)
        self._check_new_ids(ids, len(text_list))
        self.skipped = []
        # Windows are planned for every document before any is encoded: one that cannot be windowed is
        # named by its id (a file's ``path:line``) at once, not after the documents before it were encoded.
        bad: list[tuple[int, str]] = []
        plan_windows(
            self.model.tokenizer,
            text_list,
            model_window(self.model),
            self.span_config.max_span,
            WINDOW_CONTEXT,
            self.span_config.unit,
            errors=bad,
        )
        if bad and on_error == "raise":
            more = f" (and {len(bad) - 1} more documents)" if len(bad) > 1 else ""
            raise SpanInputError(
                f"Document {ids[bad[0][0]]!r}: {bad[0][1].rstrip('.')}{more}. on_error='skip' (--skip-bad) leaves "
                f"such documents out."
            )
        if bad:
            self.skipped = [(ids[position], f"Document {ids[position]!r}: {reason}") for position, reason in bad]
            if len(bad) == len(text_list):
                raise SpanInputError(
                    f"No document could be indexed ({len(self.skipped)} skipped): {self.skipped[0][1]}"
                )
            dropped = {position for position, _ in bad}
            ids = [doc_id for position, doc_id in enumerate(ids) if position not in dropped]
            text_list = [text for position, text in enumerate(text_list) if position not in dropped]
        if show_progress_bar is None:
            show_progress_bar = len(text_list) > 4 * batch_size
        pieces = []
        with (
            encoder_for(self.model, targets, pool) as encoder,
            tqdm(total=len(text_list), desc="Indexing", unit="doc", disable=not show_progress_bar) as progress,
        ):
            for first in range(0, len(text_list), DOCUMENTS_PER_STEP):
                part = self._encode(text_list[first : first + DOCUMENTS_PER_STEP], batch_size, False, encoder)
                part["segment_docs"] = part["segment_docs"] + first
                pieces.append(part)
                progress.update(min(DOCUMENTS_PER_STEP, len(text_list) - first))
        new = concat_parts(pieces)
        arrays = self._arrays
        unit_base, doc_base = len(arrays["unit_vectors"]), len(self.doc_ids)
        self._arrays = {
            "unit_vectors": np.concatenate([arrays["unit_vectors"], new["unit_vectors"]]),
            "unit_chars": np.concatenate([arrays["unit_chars"], new["unit_chars"]]),
            "span_norms": np.concatenate([arrays["span_norms"], new["span_norms"]]),
            "segment_units": np.concatenate([arrays["segment_units"], new["segment_units"][1:] + unit_base]),
            "segment_docs": np.concatenate([arrays["segment_docs"], new["segment_docs"] + doc_base]),
            "segment_first_unit": np.concatenate([arrays["segment_first_unit"], new["segment_first_unit"]]),
        }
        if self._candidates is not None:
            self._candidates = self._candidates.extended(self._arrays, unit_base)
        self.doc_ids = self.doc_ids + ids
        self.texts = self.texts + text_list
        return ids

    def _check_new_ids(self, ids: list[str], count: int) -> None:
        if len(ids) != count:
            raise SpanInputError(f"Got {len(ids)} ids for {count} documents.")
        for position, doc_id in enumerate(ids):
            if not isinstance(doc_id, str) or not doc_id:
                raise SpanInputError(f"Document id at position {position} must be a non-empty string, got {doc_id!r}.")
        seen: set[str] = set(self.doc_ids)
        for doc_id in ids:
            if doc_id in seen:
                raise SpanInputError(f"Duplicate document id {doc_id!r}.")
            seen.add(doc_id)

    def _encode(
        self, texts: list[str], batch_size: int, show_progress_bar: bool | None, encoder=None
    ) -> dict[str, np.ndarray]:
        """Segments (windows) of ``texts`` in order: unit sums, unit char offsets, span norms.

        ``encoder`` is the model, or the model seen through a multi-process pool (:func:`encoder_for`).
        """
        config = self.span_config
        segments: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] = []
        prompt = resolve_prompt(
            self.model, role="document"
        )  # the model's document prompt, as encode_document would use
        for batch in encode_windows(
            encoder or self.model,
            texts,
            config,
            batch_size,
            show_progress_bar,
            WINDOW_CONTEXT,
            "Indexing",
            prompt=prompt,
        ):
            for rows in batch.rows(batch_size):
                sums, _ = unit_sums(rows.token_embeddings, rows.boundaries)
                norms = span_sum_norms(
                    rows.token_embeddings, rows.boundaries, rows.num_units, config.min_span, config.max_span, rows.owned
                )
                sums = sums.float().cpu().numpy().astype(self.dtype)
                norms = norms.cpu().numpy()
                chars = torch.stack([rows.char_starts, rows.char_ends], dim=-1).cpu().numpy()
                for row, window in enumerate(rows.windows):
                    count = int(rows.num_units[row])
                    segments.append(
                        (
                            window.text_index,
                            window.char_start,
                            sums[row, :count],
                            chars[row, :count] + window.char_start,
                            norms[row, :count],
                            window.first_unit(config.unit),
                            window.own_char_lo,
                        )
                    )
        segments.sort(key=lambda segment: (segment[0], segment[1], segment[6]))  # text, then owned range
        dim, width = token_dimension(self.model), config.max_span - config.min_span + 1
        if not segments:
            return empty_arrays(dim, width, np.dtype(self.dtype))
        return {
            "unit_vectors": np.concatenate([s[2] for s in segments]).reshape(-1, dim),
            "unit_chars": char_offsets(np.concatenate([s[3] for s in segments]).reshape(-1, 2)),
            "span_norms": np.concatenate([s[4] for s in segments]).reshape(-1, width).astype(np.float32),
            "segment_units": np.concatenate([[0], np.cumsum([len(s[2]) for s in segments])]).astype(np.int64),
            "segment_docs": np.array([s[0] for s in segments], dtype=np.int64),
            "segment_first_unit": np.array([s[5] for s in segments], dtype=np.int64),
        }

    def remove(self, ids: Iterable[str]) -> int:
        """Drop documents by id (one id as a string, or several); returns how many were removed.

        Unknown ids raise (nothing is removed). A string is one id, never a sequence of one-letter ids.
        """
        ids = [ids] if isinstance(ids, str) else list(ids)
        for position, doc_id in enumerate(ids):
            if not isinstance(doc_id, str):
                raise SpanInputError(
                    f"Document ids are strings; id at position {position} is {type(doc_id).__name__}: {doc_id!r:.40}."
                )
        position = {doc_id: index for index, doc_id in enumerate(self.doc_ids)}
        missing = [doc_id for doc_id in ids if doc_id not in position]
        if missing:
            raise SpanInputError(f"Unknown document ids: {missing[:5]}{'…' if len(missing) > 5 else ''}.")
        drop = np.zeros(len(self.doc_ids), dtype=bool)
        drop[[position[doc_id] for doc_id in ids]] = True
        arrays = self._arrays
        keep_segments = ~drop[arrays["segment_docs"]]
        lengths = np.diff(arrays["segment_units"])
        keep_units = np.repeat(keep_segments, lengths)
        new_doc_index = np.cumsum(~drop) - 1
        self._arrays = {
            "unit_vectors": np.asarray(arrays["unit_vectors"])[keep_units],
            "unit_chars": np.asarray(arrays["unit_chars"])[keep_units],
            "span_norms": np.asarray(arrays["span_norms"])[keep_units],
            "segment_units": np.concatenate([[0], np.cumsum(lengths[keep_segments])]).astype(np.int64),
            "segment_docs": new_doc_index[arrays["segment_docs"][keep_segments]],
            "segment_first_unit": np.asarray(arrays["segment_first_unit"])[keep_segments],
        }
        self.doc_ids = [doc_id for doc_id, dropped in zip(self.doc_ids, drop) if not dropped]
        self.texts = [text for text, dropped in zip(self.texts, drop) if not dropped]
        if self._candidates is not None:  # unit numbers changed: rebuild the candidate stage with its settings
            stage, self._candidates = self._candidates, None
            if self.num_units:
                self.build_candidates(**stage.settings)
        return int(drop.sum())

    @classmethod
    def merge(cls, indexes: Sequence[SpanIndex]) -> SpanIndex:
        """One index holding the documents of several (shards built separately, e.g. in parallel).

        All must share the model (fingerprint), span settings and dtype; ids must be unique across
        them. The result is in memory (save it to persist); its calibration is the first shard's;
        a FAISS candidate stage is not carried over (call :meth:`build_candidates`).
        """
        indexes = list(indexes)
        if not indexes:
            raise SpanInputError("merge needs at least one index.")
        first = indexes[0]
        for position, other in enumerate(indexes[1:], start=1):
            if other.fingerprint != first.fingerprint:
                raise SpanInputError(
                    f"Index {position} was built with another model (fingerprint {other.fingerprint} != "
                    f"{first.fingerprint})."
                )
            if other.span_config != first.span_config or other.dtype != first.dtype:
                raise SpanInputError(
                    f"Index {position} has other settings ({other.span_config}, {other.dtype}) than index 0 "
                    f"({first.span_config}, {first.dtype})."
                )
        merged = cls(first.model, first.span_config, first.dtype)
        merged.calibration = first.calibration
        ids = [doc_id for index in indexes for doc_id in index.doc_ids]
        merged._check_new_ids(ids, len(ids))
        parts = [index._arrays for index in indexes]
        unit_bases = np.cumsum([0] + [len(p["unit_vectors"]) for p in parts])[:-1]
        doc_bases = np.cumsum([0] + [len(index) for index in indexes])[:-1]
        merged._arrays = {
            "unit_vectors": np.concatenate([np.asarray(p["unit_vectors"]) for p in parts]),
            "unit_chars": np.concatenate([np.asarray(p["unit_chars"]) for p in parts]),
            "span_norms": np.concatenate([np.asarray(p["span_norms"]) for p in parts]),
            "segment_units": np.concatenate(
                [[0]] + [np.asarray(p["segment_units"][1:]) + base for p, base in zip(parts, unit_bases)]
            ).astype(np.int64),
            "segment_docs": np.concatenate(
                [np.asarray(p["segment_docs"]) + base for p, base in zip(parts, doc_bases)]
            ).astype(np.int64),
            "segment_first_unit": np.concatenate([np.asarray(p["segment_first_unit"]) for p in parts]).astype(np.int64),
        }
        merged.doc_ids = ids
        merged.texts = [text for index in indexes for text in index.texts]
        return merged

    # ------------------------------------------------------------------ calibration
    def set_calibration(self, calibration: Calibration | str | os.PathLike | None) -> None:
        """Attach a cosine → 0–5 calibration (or a path to its JSON); matches then carry ``calibrated``.

        A calibration fitted with another model is refused. ``None`` removes it. Saved with the index.
        """
        if calibration is not None and not isinstance(calibration, Calibration):
            calibration = Calibration.load(calibration)
        if (
            calibration is not None
            and calibration.model_fingerprint
            and calibration.model_fingerprint != self.fingerprint
        ):
            raise SpanInputError(
                f"This calibration was fitted with another model (fingerprint {calibration.model_fingerprint}); "
                f"the index's model is {self.fingerprint}."
            )
        self.calibration = calibration

    # ------------------------------------------------------------------ FAISS candidate stage
    def build_candidates(
        self,
        kind: str = "ivf",
        chunk: int = 4,
        stride: int = 2,
        nlist: int | None = None,
        nprobe: int = 128,
        candidates: int = 512,
    ) -> None:
        """Build the optional FAISS candidate stage used by ``search(..., approximate=True)``.

        Every segment is cut into chunks of ``chunk`` units every ``stride`` units; a chunk's vector
        is the normalised sum of its unit vectors (the chunk's own span vector direction). FAISS
        (inner product; ``kind="ivf"``: IVF with 8-bit scalar quantisation, ``"flat"``: exhaustive)
        finds the best chunks for a query; every span overlapping them is then scored exactly.
        Costs ``d / stride`` bytes per unit with ``"ivf"`` (``4 d / stride`` with ``"flat"``); ``nlist``
        defaults to √chunks, ``nprobe`` lists are visited per query (more: better recall, slower).
        """
        if not self.num_units:
            raise SpanInputError("The index is empty: nothing to build candidates from.")
        for name, value in (("chunk", chunk), ("stride", stride), ("nprobe", nprobe), ("candidates", candidates)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpanInputError(f"{name} must be a positive integer, got {value!r}.")
        if stride > chunk:
            raise SpanInputError(f"stride ({stride}) must be <= chunk ({chunk}), or some units would be in no chunk.")
        if kind not in ("ivf", "flat"):
            raise SpanInputError(f"kind must be 'ivf' or 'flat', got {kind!r}.")
        self._candidates = CandidateStage.create(self._arrays, kind, chunk, stride, nlist, nprobe, candidates)

    # ------------------------------------------------------------------ searching
    def __len__(self) -> int:
        return len(self.doc_ids)

    @property
    def num_units(self) -> int:
        return len(self._arrays["unit_vectors"])

    def search(
        self,
        queries: str | Sequence[str],
        top_k: int = 10,
        threshold: float | None = None,
        min_span: int | None = None,
        max_span: int | None = None,
        batch_size: int = 32,
        *,
        approximate: bool = False,
        candidates: int | None = None,
        nprobe: int | None = None,
        per_document: int | None = None,
        scorer: str | SpanScorer | None = None,
        overlap: bool = False,
        prompt_name: str | None = None,
        prompt: str | None = None,
        device: str | None = None,
    ) -> list[list[IndexMatch]]:
        """For each query, the ``top_k`` best spans of the whole corpus by the scorer's score, best first.

        Queries are encoded as :func:`slice_st.encode_span_queries` encodes them: ``prompt`` /
        ``prompt_name`` choose the query prompt (default: the model's ``"query"`` prompt, as
        ``encode_query``; documents were indexed with its document prompt), ``device`` where the
        queries are encoded.

        Exact: the same ranking and scores as materialising every span vector. ``min_span``/
        ``max_span`` may narrow the index's span range. ``threshold`` drops matches below it.

        ``approximate=True`` uses the FAISS candidate stage (:meth:`build_candidates`): the
        ``candidates`` best chunks (default: the stage's, 512) per query, then every span overlapping them is scored
        exactly (same scores as the exact search; only spans outside the candidates can be missed).

        ``per_document=n`` keeps at most ``n`` spans of each document (e.g. 1: the ``top_k`` best
        documents, each with its best span).

        ``scorer`` (a name of :data:`slice_st.scoring.SPAN_SCORERS` or a :class:`~slice_st.scoring.SpanScorer`;
        default ``"reranked"``: the documents ranked by ``"phrase"``, then each document's spans picked by the
        re-ranker as :func:`slice_st.best_spans` picks them in its text) decides the ranking: a match's ``score``
        is the span's ``cosine`` minus the scorer's costs (length against the query's, function-word starts and
        ends, cut noun phrases, clause marks and sentence ends crossed); ``"max-cosine"`` ranks by the cosine
        alone (the paper's protocol). ``threshold`` applies to the score. ``overlap=False`` (default) drops a span that
        overlaps a better-scoring kept span of the same document (no nested copies of one place);
        ``overlap=True`` returns them too.

        Still exact with a scorer, the cap and the filter: costs are never negative, so no span scores
        above its cosine. The scan takes the ``M`` best spans by cosine, scores them, sorts by score and
        applies the cap and the filter; when the ``top_k``-th kept score is at least the ``M``-th
        (lowest scanned) cosine, no span left out can outrank or displace a kept one. Otherwise ``M``
        grows 4x and the scan runs again (until every span was ranked, or the lowest scanned cosine is
        below ``threshold``). With ``"max-cosine"`` and ``overlap=True`` this is the plain cosine top-k.
        """
        wanted = check_search(self.span_config, top_k, per_document, min_span, max_span, candidates)
        self._check_approximate(approximate)
        check_threshold(threshold)
        scorer, overlap = search_scorer(scorer), check_overlap(overlap)
        query_texts = query_list(queries)
        vectors = self.embed_queries(
            query_texts, batch_size=batch_size, prompt_name=prompt_name, prompt=prompt, device=device
        )
        scan = self._scanner(wanted, approximate, candidates, nprobe)
        limit = self.num_units * (wanted.max_span - wanted.min_span + 1)
        costs = span_costs_for(scorer, self.model, self.span_config.unit, query_texts, self._unit_flags)
        found = ranked(
            scan,
            self._matches,
            vectors,
            top_k,
            threshold,
            per_document,
            limit,
            costs=costs,
            locate=self._locate,
            overlap=overlap,
        )
        return rerank_matches(self, found, query_texts, vectors, scorer, wanted, overlap, threshold)

    def _check_approximate(self, approximate: bool) -> None:
        if approximate and self._candidates is None:
            raise SpanInputError("approximate search needs a candidate stage: call build_candidates() first.")

    def _unit_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """Scorer flags of every unit row and their mark prefix: computed from the texts on first use, cached while the
        arrays stay."""
        return cached_unit_flags(self, self._arrays["unit_chars"], lambda: index_unit_flags(self.texts, self._arrays))

    def _locate(self, units: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Spans (start unit rows, lengths) as ``(document, first unit, end unit)`` in their documents' unit numbers."""
        arrays = self._arrays
        units = np.asarray(units, dtype=np.int64)
        segments = np.searchsorted(arrays["segment_units"], units, side="right") - 1
        first = (
            np.asarray(arrays["segment_first_unit"])[segments] + units - np.asarray(arrays["segment_units"])[segments]
        )
        return np.asarray(arrays["segment_docs"])[segments], first, first + np.asarray(lengths, dtype=np.int64)

    def _scanner(self, wanted: SpanConfig, approximate: bool, candidates: int | None, nprobe: int | None):
        """``scan(query_vectors, k) -> (scores, units, lengths)``, each ``(Q, k)``: exact, or through the FAISS
        stage."""
        if approximate:
            return lambda queries, k: self._candidates.top_spans(
                self, queries, k, wanted.min_span, wanted.max_span, candidates, nprobe
            )
        return lambda queries, k: self._top_spans(queries, k, wanted.min_span, wanted.max_span)

    def embed_queries(
        self,
        queries: Sequence[str],
        batch_size: int = 32,
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        device: str | None = None,
    ) -> torch.Tensor:
        """Unit-normalised query vectors ``(Q, d)`` float32 on CPU (the mean of each query's token vectors)."""
        vectors = embed_texts(
            self.model,
            list(queries),
            batch_size=batch_size,
            prompt=resolve_prompt(self.model, prompt, prompt_name, "query"),
            device=device,
        )
        return torch.nn.functional.normalize(vectors.float().cpu(), dim=-1)

    def _top_spans(
        self, queries: torch.Tensor, top_k: int, min_span: int, max_span: int, floor: np.ndarray | None = None
    ):
        """Exact top-k spans over the whole index: ``(Q, k)`` numpy scores, start units (array rows) and lengths.

        The math is :func:`slice_st.spans.top_spans_flat` over the (memory-mapped) arrays, seen as
        tensors without a copy; the block shrinks with the number of queries so that its score
        buffer stays ~8 MB. ``floor`` ``(Q,)``: spans scoring at or below it may be left out.
        """
        widths = max_span - min_span + 1
        block = int(min(SEARCH_BLOCK_UNITS, max(256, SEARCH_SCORE_BUFFER // (widths * len(queries)))))
        found = top_spans_flat(
            queries,
            as_tensor(self._arrays["unit_vectors"]),
            as_tensor(self._arrays["span_norms"]),
            top_k,
            min_span,
            max_span,
            norm_min_span=self.span_config.min_span,
            block=block,
            floor=None if floor is None else torch.from_numpy(np.asarray(floor, dtype=np.float64)),
        )
        return found.scores.numpy(), found.starts.numpy(), found.lengths.numpy()

    def _matches(
        self, query_index: int, scores, units, lengths, threshold: float | None, cosines=None
    ) -> list[IndexMatch]:
        """Matches of spans (start unit rows, lengths) with their scores and cosines (``None``: the scores are the
        cosines)."""
        arrays = self._arrays
        matches = []
        for score, unit, length, cosine in zip(scores, units, lengths, scores if cosines is None else cosines):
            if not np.isfinite(score) or (threshold is not None and score < threshold):
                continue
            segment = int(np.searchsorted(arrays["segment_units"], unit, side="right")) - 1
            doc = int(arrays["segment_docs"][segment])
            start = int(arrays["unit_chars"][unit, 0])
            end = int(arrays["unit_chars"][unit + length - 1, 1])
            unit_start = int(arrays["segment_first_unit"][segment] + unit - arrays["segment_units"][segment])
            calibrated = None if self.calibration is None else round(self.calibration.degree(float(cosine)), 4)
            matches.append(
                IndexMatch(
                    query_index,
                    self.doc_ids[doc],
                    doc,
                    start,
                    end,
                    self.texts[doc][start:end],
                    float(score),
                    unit_start,
                    unit_start + int(length),
                    calibrated,
                    float(cosine),
                )
            )
        return matches

    def unit_profile(
        self,
        query: str | None,
        doc_id: str,
        min_span: int | None = None,
        max_span: int | None = None,
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Where along one document the query peaks: each unit's character range and its best covering span's cosine.

        Returns ``(chars, scores)``: ``chars`` ``(U, 2)`` the start and end offset of each unit of the
        document (word or token, in order) and ``scores`` ``(U,)`` the cosine of the best span of
        ``min_span..max_span`` units containing it (:func:`slice_st.spans.unit_peak_scores`, one pass
        over the document's units; ``-inf`` for a unit no span covers). The query is encoded as in
        :meth:`search`. A long document's windows each score the spans they own, as the search does.
        ``query=None`` returns only the units (``scores`` is ``None``; nothing is encoded).

        >>> chars, scores = index.unit_profile("plays the guitar", "0")  # doctest: +SKIP
        """
        wanted = check_search(self.span_config, 1, None, min_span, max_span, None)
        position = (
            {doc_id: number for number, doc_id in enumerate(self.doc_ids)}.get(doc_id)
            if isinstance(doc_id, str)
            else None
        )
        if position is None:
            raise SpanInputError(f"Unknown document id {doc_id!r:.80}.")
        arrays = self._arrays
        segments = np.flatnonzero(np.asarray(arrays["segment_docs"]) == position)
        bounds = np.asarray(arrays["segment_units"])
        lengths = bounds[segments + 1] - bounds[segments]
        rows = np.repeat(bounds[segments] - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
        doc_units = np.repeat(np.asarray(arrays["segment_first_unit"])[segments] - bounds[segments], lengths) + rows
        count = int(doc_units.max()) + 1 if len(doc_units) else 0
        chars = np.zeros((count, 2), dtype=np.int64)
        chars[doc_units] = np.asarray(arrays["unit_chars"][rows])
        if query is None:
            return chars, None
        vector = self.embed_queries(query_list(query)[:1], prompt_name=prompt_name, prompt=prompt)
        vectors = torch.from_numpy(np.asarray(arrays["unit_vectors"][rows], dtype=np.float32))
        norms = torch.from_numpy(np.asarray(arrays["span_norms"][rows], dtype=np.float32))
        scores = unit_peak_scores(
            vector @ vectors.T, norms, wanted.min_span, wanted.max_span, norm_min_span=self.span_config.min_span
        )[0]
        best = np.full(count, -np.inf)
        np.maximum.at(best, doc_units, scores.numpy())  # overlapping windows share units: each keeps its best
        return chars, best

    # ------------------------------------------------------------------ persistence
    def info(self) -> dict[str, Any]:
        """What the index holds and what it costs in memory."""
        arrays = self._arrays
        nbytes = sum(np.asarray(arrays[name]).nbytes for name in arrays)
        dim = arrays["unit_vectors"].shape[1]
        # what materialising every span vector (float32) would cost: one d-vector per existing span
        norms = arrays["span_norms"]
        spans = sum(
            int(np.isfinite(norms[i : i + SEARCH_BLOCK_UNITS]).sum()) for i in range(0, len(norms), SEARCH_BLOCK_UNITS)
        )
        materialised = spans * dim * 4
        return {
            "format_version": INDEX_FORMAT_VERSION,
            "documents": len(self.doc_ids),
            "segments": len(arrays["segment_docs"]),
            "units": self.num_units,
            "spans": spans,
            "unit": self.span_config.unit,
            "min_span": self.span_config.min_span,
            "max_span": self.span_config.max_span,
            "dimension": dim,
            "dtype": self.dtype,
            "array_bytes": int(nbytes),
            "materialised_span_bytes": int(materialised),
            "model_name": self.model_name,
            "model_path": self.model_path,
            "model_fingerprint": self.fingerprint,
            "model_backend": self.model_runtime.get("backend", "torch"),
            "model_file": self.model_runtime.get("model_file"),
            "calibration": None
            if self.calibration is None
            else {
                "pair_score": self.calibration.pair_score,
                "source": self.calibration.source,
                "pairs": self.calibration.pairs,
                "spearman": self.calibration.spearman,
            },
            "candidates": None if self._candidates is None else self._candidates.info(),
        }

    def save(self, path: str | os.PathLike, *, overwrite: bool = True, timeout: float | None = 0) -> str:
        """Write the index to a directory, atomically (the previous version stays until the new one is complete).

        Saves to one directory are serialised by its writer lock (``.lock``): another process saving
        there at the same time makes this one wait up to ``timeout`` seconds (0: not at all, ``None``:
        as long as it takes), then :class:`IndexBusyError`. An index loaded from ``path`` is saved back
        only if nobody saved there since it was loaded (else :class:`IndexConflictError`: load again
        and redo the change, or use :meth:`open_for_update`, which holds the lock from load to commit).
        ``overwrite=False`` refuses to replace an index already at ``path`` that this one was not
        loaded from. Only the data folders the index itself wrote are ever removed.
        """
        path = os.fspath(path)
        with index_lock(path, timeout=timeout):
            return self._save_locked(path, overwrite)

    def _save_locked(self, path: str, overwrite: bool) -> str:
        try:
            current = read_manifest(path, must_exist=False)
        except SpanInputError:
            current = None  # an unreadable manifest: nothing to keep or to check against
        loaded_here = self._origin is not None and self._origin[0] == os.path.realpath(path)
        if current is not None and loaded_here and (current["data"], current.get("generation")) != self._origin[1:]:
            raise IndexConflictError(
                f"{path} was saved by another process after this index was loaded from it (now "
                f"{current['documents']} documents, "
                f"data {current['data']}): saving would lose that change. Load the index again and redo yours "
                "(SpanIndex.open_for_update holds the directory from load to save)."
            )
        if current is not None and not overwrite and not loaded_here:
            raise SpanInputError(
                f"{path} already holds an index: add to it, or replace it explicitly (overwrite=True, --force)."
            )
        generation = int(current.get("generation", 0)) + 1 if current is not None else 1
        data_dir = None
        try:
            data_dir = new_data_directory(path, generation)
            samples = {}
            for name, values in self._arrays.items():
                values = np.asarray(values)
                save_array(os.path.join(data_dir, f"{name}.npy"), values)
                samples[name] = array_digest(values)
            encoded = [text.encode("utf-8") for text in self.texts]
            offsets = np.concatenate([[0], np.cumsum([len(b) for b in encoded])]).astype(np.int64)
            save_array(os.path.join(data_dir, "text_offsets.npy"), offsets)
            samples["text_offsets"] = array_digest(offsets)
            write_bytes(os.path.join(data_dir, "texts.bin"), b"".join(encoded))
            write_bytes(os.path.join(data_dir, "doc_ids.json"), json.dumps(self.doc_ids, ensure_ascii=False).encode())
            if self.calibration is not None:
                write_bytes(
                    os.path.join(data_dir, CALIBRATION_FILE), json.dumps(self.calibration.to_dict(), indent=1).encode()
                )
            if self._candidates is not None:
                self._candidates.save(data_dir)
            write_bytes(os.path.join(data_dir, SETTINGS_FILE), json.dumps(self._settings()).encode())
            files = {
                entry.name: {"bytes": entry.stat().st_size, "sha256": file_digest(entry.path)}
                for entry in sorted(os.scandir(data_dir), key=lambda e: e.name)
                if entry.name != DATA_MARKER
            }
            fsync_directory(data_dir)
            manifest = self.info() | {
                "data": os.path.basename(data_dir),
                "generation": generation,
                "span_config": self.span_config.to_dict(),
                "files": files,
                "samples": samples,
            }
            write_manifest(path, manifest)  # the commit point: a new temporary file, then os.replace
        except OSError as error:  # a full disk, an I/O error (numpy's "N requested and M written" has no errno)
            if data_dir is not None:
                shutil.rmtree(data_dir, ignore_errors=True)
            if isinstance(error, FileAccessError):
                raise
            raise FileAccessError(
                f"cannot save the index to {path}: {error.strerror or error} (the previous version is unchanged)."
            ) from error
        except BaseException:
            if data_dir is not None:
                shutil.rmtree(data_dir, ignore_errors=True)
            raise
        try:
            remove_old_data(path, keep=manifest["data"], replaced=None if current is None else current["data"])
        except OSError:  # pragma: no cover - committed already; the next save retries the clean-up
            pass
        self._origin = (os.path.realpath(path), manifest["data"], generation)
        return path

    def _settings(self) -> dict[str, Any]:
        """What the arrays were written with, stored in the data folder (:data:`SETTINGS_FILE`) and checked against the
        manifest."""
        return {"span_config": self.span_config.to_dict(), "dtype": self.dtype, "model_fingerprint": self.fingerprint}

    @classmethod
    @contextmanager
    def open_for_update(
        cls,
        path: str | os.PathLike,
        model: SentenceTransformer | str | None = None,
        *,
        timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
        mmap: bool = True,
        **model_options: Any,
    ) -> Iterator[SpanIndex]:
        """Load the index at ``path`` holding its writer lock, yield it, and save it when the block ends without error.

        No other writer can change the directory between the load and the save, so concurrent
        updates (``add``, ``remove``, calibration…) all land, one after the other. Another writer
        holding the lock makes this wait (``timeout`` seconds; ``None``: as long as it takes;
        ``on_wait(holder)`` is called before waiting). An error inside the block saves nothing.

        >>> with SpanIndex.open_for_update("runs/corpus-index") as index:     # doctest: +SKIP
        ...     index.add(["a new document"], ["doc-9"])
        """
        path = os.fspath(path)
        if not os.path.exists(os.path.join(path, MANIFEST)):
            read_manifest(path, must_exist=True)  # the clear error for a missing or half-made index
        check_index_target(path)  # read-only: said before the model loads
        with index_lock(path, timeout=timeout, on_wait=on_wait):
            index = cls.load(path, model, mmap=mmap, **model_options)
            yield index
            index.save(path)

    @classmethod
    def merge_saved(
        cls,
        paths: Sequence[str | os.PathLike],
        output: str | os.PathLike,
        *,
        force: bool = False,
        on_wait: Callable[[str], None] | None = None,
    ) -> SpanIndex:
        """:meth:`merge` of saved indexes, saved to ``output`` under its writer lock (from reading them to the commit);
        an index already in ``output`` is replaced only with ``force`` (or when it is one of ``paths``)."""
        paths, output = [os.fspath(path) for path in paths], os.fspath(output)
        check_index_target(output)
        if os.path.exists(os.path.join(output, MANIFEST)) and not force and output not in paths:
            raise SpanInputError(f"{output} already holds an index: use --force to replace it.")
        with index_lock(output, timeout=None, on_wait=on_wait):
            first = cls.load(paths[0])
            merged = cls.merge([first] + [cls.load(path, first.model) for path in paths[1:]])
            merged.model_name, merged.model_path = first.model_name, first.model_path
            merged.save(output)
        return merged

    @classmethod
    def describe(cls, path: str | os.PathLike, *, verify: bool = False) -> dict[str, Any]:
        """What a saved index holds (its manifest's summary, bytes per unit); ``verify`` loads it and checks every
        file's SHA-256 (raising on any mismatch)."""
        manifest = read_manifest(os.fspath(path), must_exist=True)
        info = {key: value for key, value in manifest.items() if key not in ("span_config", "files", "samples")}
        array_bytes = info.get("array_bytes") or 0
        info["bytes_per_unit"] = round(array_bytes / max(int(info.get("units") or 0), 1), 1)
        info["smaller_than_materialised"] = round((info.get("materialised_span_bytes") or 0) / max(array_bytes, 1), 1)
        if verify:
            cls.load(path, verify=True)
            info["verified"] = True
        return info

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        model: SentenceTransformer | str | None = None,
        mmap: bool = True,
        *,
        verify: bool = False,
        device: str | None = None,
        **model_options: Any,
    ) -> SpanIndex:
        """Open a saved index (arrays memory-mapped). ``model`` must be the one it was built with (or its path / Hub
        id).

        With no model, the index's recorded model is loaded (the embedded default if none). Every load
        checks file sizes, the texts' and ids' checksums and a sample of every array's rows against
        the manifest; ``verify=True`` also checks every file's full SHA-256. A load that races a save
        reads the new manifest and retries: it returns the old or the new index, never an error.

        A model named by a path or id, or the recorded one, is loaded with ``device`` and ``model_options``
        (:func:`slice_st.load_model`'s ``backend``, ``model_file``, ``threads``, …); the recorded one on the
        backend and exported file the index was built with unless ``backend`` is given.
        """
        from slice_st.loading import load_model

        path = os.fspath(path)
        manifest = read_manifest(path, must_exist=True)
        if model is None or isinstance(model, (str, os.PathLike)):
            recorded = manifest.get("model_backend", "torch")
            if model is None and recorded != "torch" and "backend" not in model_options:  # the same exported file
                model_options.update(
                    backend=recorded, model_file=model_options.get("model_file") or manifest.get("model_file")
                )
            source = model_source(path, manifest) if model is None else os.fspath(model)
            model = load_model(source, device=device, **model_options)
        model = _as_model(model)
        fingerprint = model_fingerprint(model)
        index, manifest = read_consistent(
            path, manifest, lambda found: cls._read_data(path, found, model, fingerprint, mmap, verify)
        )
        index._origin = (os.path.realpath(path), manifest["data"], manifest.get("generation"))
        return index

    @classmethod
    def _read_data(
        cls, path: str, manifest: dict[str, Any], model, fingerprint: str, mmap: bool, verify: bool
    ) -> SpanIndex:
        """The index named by one manifest; ``OSError``/``ValueError`` if its data folder is missing or does not
        match."""
        if fingerprint != manifest["model_fingerprint"]:
            raise SpanInputError(
                f"{path} was built with another model (fingerprint {manifest['model_fingerprint']}, "
                f"name {manifest.get('model_name') or 'unknown'!r}); this model's fingerprint is {fingerprint}. "
                "Load it with the model it was built with, or rebuild the index."
            )
        index = cls(model, SpanConfig(**manifest["span_config"]), manifest["dtype"])
        data_dir = os.path.join(path, manifest["data"])
        if os.path.islink(data_dir):
            raise SpanInputError(
                f"{path}: the data folder {manifest['data']} is a symbolic link (nothing outside the index folder is "
                f"read)."
            )
        # The data folder is opened once, without following a link, and every file is opened inside that very
        # folder: a link swapped in for the folder (or a file) after the checks below is refused, never read.
        with open_folder(data_dir) as folder:
            return cls._read_data_files(path, manifest, index, data_dir, folder, mmap, verify)

    @classmethod
    def _read_data_files(
        cls,
        path: str,
        manifest: dict[str, Any],
        index: SpanIndex,
        data_dir: str,
        folder: int | None,
        mmap: bool,
        verify: bool,
    ) -> SpanIndex:
        """:meth:`_read_data` for the data folder open as ``folder`` (:func:`slice_st.text.open_folder`)."""

        def entry(name: str) -> str:
            return folder_entry(data_dir, name, folder)

        files = manifest["files"]  # plain names, checked by read_manifest
        for name, expected in files.items():
            found = os.lstat(os.path.join(data_dir, name))  # the entry itself: a link is refused, never followed
            if not stat.S_ISREG(found.st_mode):
                raise ValueError(f"{name} is not a regular file")
            if found.st_size != expected["bytes"]:
                raise ValueError(f"{name} has {found.st_size} bytes, the manifest says {expected['bytes']}")
            if verify and file_digest(entry(name), expected["bytes"], folder=folder) != expected["sha256"]:
                raise ValueError(f"{name} does not match its checksum")
        # Each file is opened once, without following a link (O_NOFOLLOW, then fstat): a link swapped in after the
        # lstat checks above is refused, never read.
        settings_bytes = read_bytes(entry(SETTINGS_FILE), files[SETTINGS_FILE]["bytes"], folder=folder)
        if hashlib.sha256(settings_bytes).hexdigest() != files[SETTINGS_FILE]["sha256"]:
            raise ValueError(f"{SETTINGS_FILE} does not match its checksum")
        stored = json.loads(settings_bytes.decode("utf-8"))
        recorded = {
            "span_config": index.span_config.to_dict(),
            "dtype": manifest["dtype"],
            "model_fingerprint": manifest["model_fingerprint"],
        }
        changed = [key for key in recorded if stored.get(key) != recorded[key]]
        if changed:
            raise SpanInputError(
                f"{path}: the manifest's {', '.join(changed)} ({', '.join(f'{recorded[key]}' for key in changed)}) "
                f"do not match what the "
                f"index data was written with ({', '.join(f'{stored.get(key)}' for key in changed)}): the manifest "
                f"was edited. "
                "Restore it or rebuild the index."
            )
        arrays = {
            name: load_array(entry(f"{name}.npy"), mmap, files[f"{name}.npy"]["bytes"], folder=folder)
            for name in ARRAYS
        }
        blob = read_bytes(entry("texts.bin"), files["texts.bin"]["bytes"], folder=folder)
        ids_bytes = read_bytes(entry("doc_ids.json"), files["doc_ids.json"]["bytes"], folder=folder)
        for name, data in (("texts.bin", blob), ("doc_ids.json", ids_bytes)):
            if name in files and hashlib.sha256(data).hexdigest() != files[name].get("sha256"):
                raise ValueError(f"{name} does not match its checksum")
        for name, expected in (manifest.get("samples") or {}).items():
            if name in arrays and array_digest(arrays[name]) != expected:
                raise ValueError(f"{name}.npy does not match its checksum (changed, shuffled or swapped)")
        doc_ids = json.loads(ids_bytes.decode("utf-8"))
        offsets = arrays.pop("text_offsets")
        if (
            not isinstance(doc_ids, list)
            or len(offsets) != len(doc_ids) + 1
            or offsets[-1] != len(blob)
            or len(arrays["unit_vectors"]) != manifest["units"]
            or len(doc_ids) != manifest["documents"]
            or len(arrays["span_norms"]) != manifest["units"]
            or len(arrays["segment_units"]) != len(arrays["segment_docs"]) + 1
            or arrays["segment_units"][-1] != manifest["units"]
            or arrays["span_norms"].ndim != 2
            or arrays["span_norms"].shape[1] != index.span_config.max_span - index.span_config.min_span + 1
            or arrays["unit_vectors"].ndim != 2
            or arrays["unit_vectors"].shape[1] != index._arrays["unit_vectors"].shape[1]
        ):
            raise ValueError("the index data does not match its manifest (corrupt or half-written)")
        index._arrays = arrays
        index.doc_ids = doc_ids
        index.model_name = manifest.get("model_name") or index.model_name
        index.model_path = manifest.get("model_path", index.model_path)
        index.texts = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(doc_ids))]
        if manifest.get("calibration"):
            stored_calibration = read_bytes(
                entry(CALIBRATION_FILE), files.get(CALIBRATION_FILE, {}).get("bytes"), folder=folder
            )
            index.calibration = Calibration.from_dict(json.loads(stored_calibration.decode("utf-8")), CALIBRATION_FILE)
        if manifest.get("candidates"):
            index._candidates = CandidateStage.load(data_dir, manifest["candidates"], folder=folder)
        return index


def _check_not_indexed_yet(doc_ids: Sequence[str], documents: Sequence[Any]) -> None:
    """Refuse a file already indexed under another spelling of its path (``a.txt`` vs ``/abs/a.txt``, a link)."""
    sources = {
        d.source
        for d in documents
        if isinstance(d, Document) and d.source and d.source != "-" and d.id == f"{os.path.normpath(d.source)}:{d.line}"
    }
    if not sources:
        return
    indexed: dict[str, str] = {}  # real path → the spelling it was indexed under, for ids <path>:<line>
    for path in dict.fromkeys(doc_id.rpartition(":")[0] for doc_id in doc_ids if doc_id.rpartition(":")[2].isdigit()):
        if path and os.path.isfile(path):
            indexed.setdefault(os.path.realpath(path), path)
    for source in sorted(sources):
        spelling = indexed.get(os.path.realpath(source))
        if spelling is not None and os.path.normpath(spelling) != os.path.normpath(source):
            raise SpanInputError(
                f"{source} is already in the index as {spelling} (the same file): remove those documents first, "
                "or give the file as it was indexed."
            )


def _as_model(model: Any) -> SentenceTransformer:
    """A model object, or one loaded from a path / Hub id; anything else is a clear error."""
    from slice_st.loading import load_model

    if isinstance(model, (str, os.PathLike)):
        return load_model(os.fspath(model))
    if not callable(getattr(model, "encode", None)) or not hasattr(model, "tokenizer"):
        raise SpanInputError(
            f"model must be a SentenceTransformer, a model folder or a Hub id, got {type(model).__name__}."
        )
    return model
