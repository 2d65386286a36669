"""``SpanIndex``: exact span search over a corpus with ``d + K`` stored numbers per unit (its token vectors' sum and
the norms of the spans starting there) instead of a vector per span. See docs/guides/corpus-index.md."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
import torch
from tqdm.auto import tqdm

from slice_st._checks import (
    check_merge_identical,
    check_overlap,
    check_threshold,
    check_top_k,
    query_list,
)
from slice_st.backends import backend_of, runner_of
from slice_st.config import SpanConfig
from slice_st.data.corpus import Document, file_of_id
from slice_st.encode import (
    embed_texts,
    encode_windows,
    model_window,
    resolve_prompt,
    resolve_span_config,
    token_dimension,
)
from slice_st.errors import ExactTierError, IndexConflictError, IndexFileError, SpanInputError
from slice_st.index import storage
from slice_st.index.calibration import CALIBRATION_FILE, Calibration, calibrated_degree
from slice_st.index.candidates import CandidateStage, ranges_to_indices
from slice_st.index.compressed import (
    DEFAULT_CANDIDATES,
    CompressedTier,
    CompressionSpec,
    candidate_rows,
)
from slice_st.index.encoding import (
    concat_parts,
    empty_arrays,
    encoder_for,
    offsets_of,
    pool_devices,
    texts_and_ids,
)
from slice_st.index.search import (
    IndexMatch,
    as_tensor,
    cached_unit_flags,
    check_search,
    held_unit_flags,
    index_unit_flags,
    profiles_of,
    ranked,
    rerank_matches,
    search_merged,
    span_costs_for,
    with_confidence,
)
from slice_st.loading import model_fingerprint, model_identity
from slice_st.pretrained import is_shipped_model_name
from slice_st.search import search_calibrator, search_scorer
from slice_st.spans import (
    FLAT_BLOCK_UNITS,
    span_sum_norms,
    top_spans_flat,
    unit_peak_scores,
    unit_sums,
)
from slice_st.tokens import WINDOW_CONTEXT, plan_windows

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from slice_st.index.ray_engine import RayBuild
    from slice_st.scoring import SpanScorer

#: Documents encoded per step of :meth:`SpanIndex.add` (the progress bar moves per step).
DOCUMENTS_PER_STEP = 256
#: In a data folder: each document's file, where one is not the file its id ``<path>:<line>`` names (JSONL files).
SOURCES_FILE = "doc_sources.json"
#: Without the exact tier: the queries of one search whose candidates are re-encoded together hold at most this many
#: documents (or one query), each document encoded once for them.
REENCODED_DOCUMENTS = 2048
#: Without the exact tier: windows per forward pass when candidate documents are re-encoded.
REENCODE_BATCH = 32
#: Why a saved index's data was refused (a ValueError: a concurrent save is retried, else it stands).
CORRUPT = "the index data does not match its manifest (corrupt or half-written)"
#: A compressed index's scorer flags of every unit (:func:`~slice_st.scoring.unit_flags`), read for its candidates.
UNIT_FLAGS = "unit_flags"


class SpanIndex:
    """Exact top-k span search over a corpus, with ``d + K`` stored numbers per unit.

    Args:
        model: The ``SentenceTransformer`` that encodes documents and queries.
        span_config: The spans the index holds (:class:`~slice_st.config.SpanConfig`).
        dtype: ``"float32"`` or ``"float16"`` stored unit vectors.

    :meth:`compress` (or ``build(..., compression="pq48")``) adds a compressed tier kept in memory; the arrays above
    become the exact tier, memory-mapped from disk once saved and read only for each query's candidate documents.
    With ``exact_tier=False`` the unit vectors and span norms are not kept (a twentieth of the disk) and each search
    re-encodes its candidate documents instead.

    The constructor makes an empty index: build one with :meth:`build`, :meth:`from_files` or :meth:`load`.

    Example:
        >>> from slice_st import SpanIndex, load_model
        >>> documents = ["A man played the guitar on stage.", "The flight was late."]
        >>> index = SpanIndex.build(documents, load_model(), max_span=5)
        >>> [(m.doc_id, m.span) for m in index.search("plays the guitar", top_k=1)[0]]
        [('0', 'played the guitar')]
    """

    def __init__(
        self, model: SentenceTransformer, span_config: SpanConfig, dtype: str = "float32"
    ) -> None:
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
        # the file each document was read from ("": none), see documents()
        self.sources: list[str] = []
        self.calibration: Calibration | None = None
        # (id, reason) of documents the last add(on_error="skip") left out
        self.skipped: list[tuple[str, str]] = []
        self.replaced: list[str] = []  # ids of the documents the last add(replace=True) removed
        self._candidates: CandidateStage | None = None
        self._compressed: CompressedTier | None = None
        # (directory, data folder, generation) loaded from
        self._origin: tuple[str, str, int | None] | None = None
        # the memory-mapped unit arrays loaded, each with its FileRows (rows read from the file, not the map)
        self._unit_files: dict[str, tuple[np.ndarray, storage.FileRows]] | None = None
        # a compressed search's candidate rows, kept between queries
        self._scratch = storage.Scratch()
        self.arrays = empty_arrays(token_dimension(model), span_config, dtype)

    def __repr__(self) -> str:
        config = self.span_config
        tier = f", compression={self.compression!r}" if self._compressed is not None else ""
        tier += "" if self.exact_tier else ", exact_tier=False"
        return (
            f"SpanIndex(model={self.model_name or self.model_path or 'unnamed'!r}, documents={len(self)}, "
            f"units={self.num_units}, unit={config.unit!r}, spans={config.min_span}..{config.max_span}, "
            f"dtype={self.dtype!r}{tier})"
        )

    @overload
    @classmethod
    def build(
        cls, texts, model=None, ids=None, *, engine: Literal["ray"], **options: Any
    ) -> RayBuild: ...
    @overload
    @classmethod
    def build(
        cls, texts, model=None, ids=None, *, engine: str = "local", **options: Any
    ) -> SpanIndex: ...
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
        dtype: str | None = None,
        engine: str = "local",
        compression: str | None = None,
        exact_tier: bool = True,
        **options: Any,
    ) -> SpanIndex | RayBuild:
        """Encode ``texts`` (one forward pass each, long ones windowed) into a new index: :meth:`add` to an empty one.

        ``engine="ray"`` builds on Ray instead (``slice-st[ray]``, docs/guides/ray.md): ``concurrency`` actors of the
        cluster at ``address`` (``None``: Ray started here) save the same index, in shards of about ``shard_bytes`` of
        text, to ``output``; a rerun resumes (``force=True`` rebuilds). Open it with
        :class:`~slice_st.index.ShardedSpanIndex` or :class:`~slice_st.index.RayShardedSpanIndex`.

        Args:
            texts: Strings, :class:`~slice_st.data.corpus.Document` s, or a ``datasets.Dataset``.
            model: The ``SentenceTransformer`` (or its path / Hub id; default: the default model).
            ids: Unique string ids (default ``"0"``, ``"1"``, …).
            min_span: Shortest span held (default: the model's, :func:`slice_st.get_span_config`).
            max_span: Longest span held; searches may use any sub-range.
            unit: ``"word"`` or ``"token"``.
            dtype: ``"float32"`` or ``"float16"`` (half the size; scores move by about 1e-3, near-ties may swap);
                default ``"float16"`` with ``compression``, else ``"float32"``.
            engine: ``"local"`` or ``"ray"``.
            compression: A compressed tier (:meth:`compress`), e.g. ``"pq48"``; ``None``: exact only. On Ray every
                shard is coded with one set of codebooks, trained on a sample of all the shards' units.
            exact_tier: With ``compression``, ``False`` keeps no unit vectors nor span norms
                (:meth:`compress`): searches re-encode their candidate documents.
            **options: Those of :meth:`add`; with ``engine="ray"`` those of
                :func:`slice_st.index.ray_engine.build_on_ray` (``output``, ``address``, ``concurrency``…).

        Returns:
            The index; with ``engine="ray"`` a :class:`~slice_st.index.RayBuild`.

        Example:
            >>> SpanIndex.build(texts, load_model(), engine="ray", output="runs/ray-index")  # doctest: +SKIP
        """
        model = _as_model(model)
        span_config = resolve_span_config(model, min_span, max_span, unit)
        dtype = dtype or ("float16" if compression is not None else "float32")
        if compression is not None:
            # a bad spec fails before any encoding
            CompressionSpec.parse(compression, token_dimension(model))
        _check_exact_tier(exact_tier, compression, engine)
        if engine == "ray":
            from slice_st.index.ray_engine import build_on_ray

            options |= {"texts": texts, "ids": ids, "dtype": dtype, "compression": compression}
            return build_on_ray(cls, model, span_config, **options)
        if engine != "local":
            raise SpanInputError(f"engine must be 'local' or 'ray', got {engine!r}.")
        if any(
            options.pop(name, None) is not None for name in ("output", "address", "concurrency")
        ):
            raise SpanInputError(
                "output, address and concurrency are options of engine='ray'; the local build returns the index "
                "(save it)."
            )
        for name in ("num_gpus", "shard_bytes", "force"):  # Ray's, harmless here
            options.pop(name, None)
        index = cls(model, span_config, dtype)
        index.add(texts, ids, **options)
        if compression is not None:
            index.compress(compression, exact_tier=exact_tier)
        return index

    @overload
    @classmethod
    def from_files(
        cls, paths: Any, model: Any = None, *, engine: Literal["ray"], **options: Any
    ) -> RayBuild: ...
    @overload
    @classmethod
    def from_files(
        cls, paths: Any, model: Any = None, *, engine: str = "local", **options: Any
    ) -> SpanIndex: ...
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
        **options: Any,
    ) -> SpanIndex | RayBuild:
        """Build from text files (one document per line/paragraph, id ``path:line``) or JSONL files (id and text
        fields); ``options`` are :meth:`build`'s. With ``engine="ray"`` the Ray workers read the files (also Parquet,
        and ``pyarrow.fs`` URIs such as ``s3://bucket/corpus/``; a folder stands for its files)."""
        from slice_st.data.corpus import read_corpus

        reading = {"split": split, "fmt": fmt, "id_field": id_field, "text_field": text_field}
        if options.get("engine", "local") != "local":  # the workers read the files
            return cls.build(None, model, files=paths, **reading, **options)
        return cls.build(read_corpus(paths, **reading), model, **options)

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
        replace: bool = False,
    ) -> list[str]:
        """Append documents; returns their ids. On any error the index is left as it was.

        Args:
            texts: Strings, :class:`~slice_st.data.corpus.Document` s (each with its id), or a ``datasets.Dataset``.
            ids: Unique new string ids (default: the next free numbers).
            batch_size: Windows per forward pass.
            show_progress_bar: Show a progress bar (default: for more than four batches).
            text_field: The Dataset column of the texts.
            id_field: The Dataset column of the ids (``None``: numbered).
            on_error: ``"skip"`` leaves out documents the model cannot window (e.g. runs of dot leaders), listed in
                ``self.skipped`` as ``(id, reason)``; ``"raise"``.
            devices: Encode in one process per device (``["cuda:0", "cuda:1"]``) through sentence-transformers'
                multi-process pool: the same index, to float tolerance.
            processes: Encode in that many CPU processes.
            pool: A pool from ``model.start_multi_process_pool(...)`` (reused, not stopped).
            replace: The documents of a file already in the index (:meth:`documents`) are replaced by the new ones of
                that file (``Document`` s read from files, e.g. by :func:`~slice_st.data.corpus.read_corpus`), not
                added twice.

        Returns:
            The ids of the documents added.
        """
        if on_error not in ("raise", "skip"):
            raise SpanInputError(f"on_error must be 'raise' or 'skip', got {on_error!r}.")
        targets = pool_devices(devices, processes, pool)
        if isinstance(texts, (Iterator, tuple)):
            texts = list(texts)
        documents = [d for d in texts if isinstance(d, Document)] if isinstance(texts, list) else []
        sources = {d.source for d in documents if d.source} if replace else set()
        old = sorted({p for source in sources for p in self._file_positions(source)})
        replaced = set(old)
        taken = [doc_id for position, doc_id in enumerate(self.doc_ids) if position not in replaced]
        _check_not_indexed_yet(taken, documents)
        files = [d.source if isinstance(d, Document) else "" for d in texts] if documents else []
        text_list, ids = texts_and_ids(texts, ids, text_field, id_field, taken)
        given = dict(zip(ids, files))  # each id's Document source, before any is skipped
        self.skipped = []
        text_list, ids = self._windowable(text_list, ids, on_error)
        show = len(text_list) > 4 * batch_size if show_progress_bar is None else show_progress_bar
        parts, doc_bases = [self.arrays], [0]
        with (
            encoder_for(self.model, targets, pool) as encoder,
            tqdm(total=len(text_list), desc="Indexing", unit="doc", disable=not show) as progress,
        ):
            for first in range(0, len(text_list), DOCUMENTS_PER_STEP):
                parts.append(
                    self._encode(text_list[first : first + DOCUMENTS_PER_STEP], batch_size, encoder)
                )
                doc_bases.append(len(self.doc_ids) + first)
                progress.update(min(DOCUMENTS_PER_STEP, len(text_list) - first))
        self._append(parts, doc_bases)
        self.doc_ids, self.texts = self.doc_ids + ids, self.texts + text_list
        self.sources = self.sources + [_source(doc_id, given.get(doc_id, "")) for doc_id in ids]
        self.replaced = [self.doc_ids[position] for position in old]
        if old:  # the replaced documents, now that the new ones are in
            self._drop(old)
        return ids

    def _append(self, parts: list[dict[str, np.ndarray]], doc_bases: list[int]) -> None:
        """The encoded ``parts[1:]`` appended to the arrays (``parts[0]``), coded by the compressed tier's codebooks
        (trained at build time); without the exact tier only their codes and offsets are kept."""
        base = len(parts[0]["unit_chars"])  # where the new units start
        if not self.exact_tier:
            assert self._compressed is not None  # an index without the exact tier is compressed
            new = concat_parts(parts[1:], [0] * (len(parts) - 1)) if len(parts) > 1 else None
            if new is not None:
                coded = self._compressed.coded(new)
                self._compressed = CompressedTier.concatenated([self._compressed, coded])
            kept = [storage.without_exact_tier(part) for part in parts]
            self.arrays = concat_parts(kept, doc_bases)
            return
        self.arrays = concat_parts(parts, doc_bases)
        if self._candidates is not None:
            self._candidates = self._candidates.extended(self.arrays, base)
        if self._compressed is not None:
            self._compressed = self._compressed.extended(self.arrays, base)

    def _windowable(
        self, texts: list[str], ids: list[str], on_error: str
    ) -> tuple[list[str], list[str]]:
        """The documents the model can window (all planned first); the others raise, or are listed in ``skipped``."""
        bad: list[tuple[int, str]] = []
        config, window = self.span_config, model_window(self.model)
        plan_windows(
            self.model.tokenizer, texts, window, config.max_span, WINDOW_CONTEXT, config.unit, bad
        )
        if bad and on_error == "raise":
            more = f" (and {len(bad) - 1} more documents)" if len(bad) > 1 else ""
            raise SpanInputError(
                f"Document {ids[bad[0][0]]!r}: {bad[0][1].rstrip('.')}{more}. on_error='skip' (--skip-bad) leaves "
                f"such documents out."
            )
        if not bad:
            return texts, ids
        self.skipped = [
            (ids[position], f"Document {ids[position]!r}: {reason}") for position, reason in bad
        ]
        if len(bad) == len(texts):
            raise SpanInputError(
                f"No document could be indexed ({len(self.skipped)} skipped): {self.skipped[0][1]}"
            )
        kept = sorted(set(range(len(texts))) - {position for position, _ in bad})
        return [texts[i] for i in kept], [ids[i] for i in kept]

    def _encode(self, texts: list[str], batch_size: int, encoder) -> dict[str, np.ndarray]:
        """The arrays of ``texts``' segments (windows) in order; ``encoder`` is the model, maybe through a pool."""
        config, segments = self.span_config, []
        prompt = resolve_prompt(self.model, role="document")  # as encode_document would use
        windows = encode_windows(
            encoder, texts, config, batch_size, False, WINDOW_CONTEXT, "Indexing", prompt=prompt
        )
        for rows in windows:  # sub-batches of batch_size windows, trimmed to their own padding
            sums, _ = unit_sums(rows.token_embeddings, rows.boundaries)
            norms = span_sum_norms(
                rows.token_embeddings,
                rows.boundaries,
                rows.num_units,
                config.min_span,
                config.max_span,
                rows.owned,
            )
            sums = sums.float().cpu().numpy().astype(self.dtype)
            norms = norms.cpu().numpy()
            chars = torch.stack([rows.char_starts, rows.char_ends], dim=-1).cpu().numpy()
            for row, window in enumerate(rows.windows):
                own = slice(0, int(rows.num_units[row]))
                # sorted by text, then owned range
                key = (window.text_index, window.char_start, window.own_char_lo)
                offsets = chars[row, own] + window.char_start
                first = window.first_unit(config.unit)
                segments.append((key, sums[row, own], offsets, norms[row, own], first))
        segments.sort(key=lambda segment: segment[0])
        if not segments:
            return empty_arrays(token_dimension(self.model), config, self.dtype)
        chars = np.concatenate([s[2] for s in segments])
        if chars.size and chars.max() >= np.iinfo(np.int32).max:
            raise SpanInputError(
                "A document longer than 2^31 characters cannot be indexed; split it."
            )
        return {
            "unit_vectors": np.concatenate([s[1] for s in segments]),
            "unit_chars": chars.astype(np.int32),
            "span_norms": np.concatenate([s[3] for s in segments]).astype(self.dtype),
            "segment_units": offsets_of([len(s[1]) for s in segments]),
            "segment_docs": np.array([s[0][0] for s in segments], dtype=np.int64),
            "segment_first_unit": np.array([s[4] for s in segments], dtype=np.int64),
        }

    def documents(self) -> list[dict[str, Any]]:
        """One row per document, in order: its ``id``, the ``file`` it was read from (``None`` for a text given as a
        string, a dataset row), its length in ``characters`` and its ``units`` (words or tokens held).
        :meth:`saved_documents` reads the same rows from a saved index."""
        return _document_rows(self.doc_ids, self.sources, map(len, self.texts), self.arrays)

    @classmethod
    def saved_documents(cls, path: str | os.PathLike) -> list[dict[str, Any]]:
        """:meth:`documents` of the index saved at ``path``, read without loading its model or its vectors."""
        path = os.fspath(path)

        def read(manifest: dict[str, Any]) -> list[dict[str, Any]]:
            with storage.DataFolder.open(path, manifest, False) as data:
                arrays = {
                    name: data.array(name, True) for name in ("segment_units", "segment_docs")
                }
                offsets = data.array("text_offsets", True)
                doc_ids, texts, sources = _read_documents(data, manifest, offsets)
            return _document_rows(doc_ids, sources, map(len, texts), arrays)

        manifest = storage.read_manifest(path, must_exist=True)
        assert manifest is not None  # must_exist: a missing index raised
        return storage.read_consistent(path, manifest, read)[0]

    def _file_positions(self, file: str | os.PathLike) -> list[int]:
        """The positions of the documents read from ``file``: the same path once normalised, or the same file."""
        file = os.fspath(file)
        wanted = os.path.normpath(file) if file != "-" else file
        real = os.path.realpath(file) if file != "-" and os.path.exists(file) else None
        same = {
            source
            for source in set(self.sources) - {""}
            if source == wanted
            or (
                real
                and source != "-"
                and os.path.exists(source)
                and os.path.realpath(source) == real
            )
        }
        return [position for position, source in enumerate(self.sources) if source in same]

    def remove(
        self, ids: Iterable[str] | None = None, *, file: str | os.PathLike | None = None
    ) -> int:
        """Drop documents by id (a string is one id), or every document of ``file`` (as :meth:`documents` names it, or
        the same file spelt otherwise); returns how many were removed. Unknown ids, or a file with no document, raise
        (nothing is removed)."""
        if (ids is None) == (file is None):
            raise SpanInputError("remove() takes document ids or file=..., one of them.")
        if file is not None:
            ids = [self.doc_ids[position] for position in self._file_positions(file)]
            if not ids:
                files = sorted({source for source in self.sources if source})
                listed = (
                    f"its files: {', '.join(files[:5])}{'…' if len(files) > 5 else ''}"
                    if files
                    else "no file"
                )
                raise SpanInputError(f"No document of {os.fspath(file)} in the index ({listed}).")
        ids = [ids] if isinstance(ids, str) else list(ids or ())
        for position, doc_id in enumerate(ids):
            if not isinstance(doc_id, str):
                raise SpanInputError(
                    f"Document ids are strings; id at position {position} is {type(doc_id).__name__}: {doc_id!r:.40}."
                )
        position = {doc_id: index for index, doc_id in enumerate(self.doc_ids)}
        missing = [doc_id for doc_id in ids if doc_id not in position]
        if missing:
            raise SpanInputError(
                f"Unknown document ids: {missing[:5]}{'…' if len(missing) > 5 else ''}."
            )
        self._drop([position[doc_id] for doc_id in ids])
        return len(set(ids))

    def _drop(self, positions: Sequence[int]) -> None:
        """Remove the documents at ``positions``."""
        drop = np.zeros(len(self.doc_ids), dtype=bool)
        drop[positions] = True
        arrays = {name: np.asarray(values) for name, values in self.arrays.items()}
        keep_segments = ~drop[arrays["segment_docs"]]
        lengths = np.diff(arrays["segment_units"])
        keep_units = np.repeat(keep_segments, lengths)
        if self._compressed is not None:
            self._compressed = self._compressed.subset(keep_units)
        units = [name for name in storage.UNIT_ARRAYS if name in arrays]
        self.arrays = {name: arrays[name][keep_units] for name in units} | {
            "segment_units": offsets_of(lengths[keep_segments]),
            "segment_docs": (np.cumsum(~drop) - 1)[arrays["segment_docs"][keep_segments]],
            "segment_first_unit": arrays["segment_first_unit"][keep_segments],
        }
        self.doc_ids = [doc_id for doc_id, dropped in zip(self.doc_ids, drop) if not dropped]
        self.texts = [text for text, dropped in zip(self.texts, drop) if not dropped]
        self.sources = [source for source, dropped in zip(self.sources, drop) if not dropped]
        # unit numbers changed: rebuild the stage, with no more lists than chunks
        if self._candidates is not None:
            settings, self._candidates = self._candidates.settings, None
            if self.num_units:
                chunks = len(
                    CandidateStage.chunk_ranges(
                        self.arrays["segment_units"], settings["chunk"], settings["stride"]
                    )
                )
                self.build_candidates(
                    **settings | {"nlist": min(settings["nlist"], chunks) or None}
                )

    @classmethod
    def merge(cls, indexes: Sequence[SpanIndex]) -> SpanIndex:
        """One index (in memory) holding the documents of several with the same model, span settings and dtype, and
        unique ids; its calibration is the first's; a FAISS stage is not carried over. A compressed first index makes
        a compressed one: its codes, the others' where coded with the same codebooks, else coded with the first's.
        Indexes without the exact tier merge only with one another, coded with the same codebooks."""
        indexes = check_alike(indexes, "index", "merge")
        first = indexes[0]
        _check_exact_tiers_merge(indexes)
        merged = cls(first.model, first.span_config, first.dtype)
        merged.calibration = first.calibration
        doc_bases = np.cumsum([0] + [len(index) for index in indexes])[:-1]
        merged.arrays = concat_parts([index.arrays for index in indexes], doc_bases)
        merged.doc_ids = [doc_id for index in indexes for doc_id in index.doc_ids]
        merged.texts = [text for index in indexes for text in index.texts]
        merged.sources = [source for index in indexes for source in index.sources]
        tiers = [index._compressed for index in indexes]
        if tiers[0] is not None:
            digest = tiers[0].codebook_digest()
            if all(tier is not None and tier.codebook_digest() == digest for tier in tiers):
                merged._compressed = CompressedTier.concatenated(tiers)
            else:
                merged.compress(codebooks=tiers[0])
        return merged

    def compress(
        self,
        compression: str | CompressionSpec = "pq48",
        *,
        seed: int = 0,
        codebooks: SpanIndex | CompressedTier | None = None,
        exact_tier: bool = True,
    ) -> None:
        """Add (or retrain) the compressed tier: FAISS trains a coarse k-means and product-quantisation codebooks on a
        sample of the units, then codes every unit; later :meth:`add` calls code new units with the same codebooks.

        Args:
            compression: ``"pq<M>[,ivf<C>][,norms<bits>]"``: ``M`` one-byte codes per unit (``M`` divides the
                dimension), ``C`` coarse centroids (default: by the number of units, at most 1024), span norms in 4
                (default) or 8 bits per span length. ``"pq48"`` keeps ~60 bytes per unit at d=384, K=20.
            seed: The sample's and k-means' seed.
            codebooks: A compressed index (or its tier) whose codebooks code the units instead, untrained (its
                ``compression`` setting, not ``compression``): shards coded alike are searched as one index.
            exact_tier: ``False`` then drops the unit vectors and span norms (the exact tier; a FAISS candidate stage,
                which needs them, goes too): saved, the index takes about a twentieth of the disk, and each search
                re-encodes its candidate documents with the model instead of reading their rows (docs/guides/
                corpus-index.md). Nothing that needs the vectors works on it after (:class:`ExactTierError`).

        Searches then scan the compressed tier for each query's ``candidates`` best documents and score only those
        exactly (docs/guides/corpus-index.md, "Compressed indexes").
        """
        self.require_exact_tier("compress() (training and coding the compressed tier)")
        if exact_tier not in (True, False):
            raise SpanInputError(f"exact_tier must be True or False, got {exact_tier!r:.40}.")
        if codebooks is None:
            spec = CompressionSpec.parse(compression, self.arrays["unit_vectors"].shape[1])
            self._compressed = CompressedTier.train(self.arrays, spec, seed=seed)
        else:
            tier = codebooks._compressed if isinstance(codebooks, SpanIndex) else codebooks
            if not isinstance(tier, CompressedTier):
                raise SpanInputError("codebooks= takes a compressed index (or its tier).")
            if tier.centroids.shape[1] != self.arrays["unit_vectors"].shape[1]:
                raise SpanInputError("codebooks= is an index of another dimension.")
            self._compressed = tier.coded(self.arrays)
        if not exact_tier:
            self.arrays = storage.without_exact_tier(self.arrays)
            self._candidates = None

    @property
    def exact_tier(self) -> bool:
        """Whether the index keeps its exact tier (every unit's vector and span norms); ``False`` after
        ``compress(..., exact_tier=False)``: searches re-encode their candidate documents."""
        return "unit_vectors" in self.arrays

    def require_exact_tier(self, what: str) -> None:
        """Raise :class:`ExactTierError` naming ``what`` when the index keeps no exact tier."""
        if not self.exact_tier:
            raise ExactTierError(
                f"{what} needs the exact tier (unit vectors and span norms), which this index does not keep "
                "(built with exact_tier=False, --no-exact-tier): rebuild the index with it."
            )

    @property
    def compression(self) -> str | None:
        """The compressed tier's setting (``"pq48,norms4"``…), ``None`` for an exact-only index."""
        return None if self._compressed is None else str(self._compressed.spec)

    def set_calibration(self, calibration: Calibration | str | os.PathLike | None) -> None:
        """Attach a cosine → 0–5 calibration (or a path to its JSON; ``None`` removes it); matches then carry
        ``calibrated``. One fitted with another model is refused. Saved with the index."""
        if calibration is not None and not isinstance(calibration, Calibration):
            calibration = Calibration.load(calibration)
        fitted_for = calibration.model_fingerprint if calibration is not None else None
        if fitted_for and fitted_for != self.fingerprint:
            raise SpanInputError(
                f"This calibration was fitted with another model (fingerprint {fitted_for}); "
                f"the index's model is {self.fingerprint}."
            )
        self.calibration = calibration

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

        Chunks of ``chunk`` units every ``stride`` units (normalised sums) go into FAISS (``kind="ivf"``: IVF with
        8-bit scalar quantisation, ``d / stride`` bytes per unit; ``"flat"``: exhaustive); every span overlapping the
        best chunks is scored exactly. ``nlist`` defaults to √chunks; ``nprobe`` lists are visited per query.
        """
        self.require_exact_tier("The FAISS candidate stage")
        if not self.num_units:
            raise SpanInputError("The index is empty: nothing to build candidates from.")
        counts = {"chunk": chunk, "stride": stride, "nprobe": nprobe, "candidates": candidates}
        for name, value in counts.items():
            check_top_k(value, name)
        check_top_k(nlist, "nlist", optional=True)
        if stride > chunk:
            raise SpanInputError(
                f"stride ({stride}) must be <= chunk ({chunk}), or some units would be in no chunk."
            )
        if kind not in ("ivf", "flat"):
            raise SpanInputError(f"kind must be 'ivf' or 'flat', got {kind!r}.")
        self._candidates = CandidateStage.create(
            self.arrays, kind, chunk, stride, nlist, nprobe, candidates
        )

    def __len__(self) -> int:
        return len(self.doc_ids)

    @property
    def num_units(self) -> int:
        return len(self.arrays["unit_chars"])

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
        merge_identical: bool = False,
        merge_limit: int | None = None,
        min_confidence: float | str | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        device: str | None = None,
    ) -> list[list[IndexMatch]]:
        """For each query, the ``top_k`` best spans of the whole corpus by the scorer's score, best first.

        Queries are encoded as :func:`slice_st.encode_span_queries` encodes them: ``prompt`` / ``prompt_name`` choose
        the query prompt (default: the model's ``"query"`` prompt; documents were indexed with its document prompt),
        ``device`` where. Exact: the ranking and scores of materialising every span vector. ``min_span``/``max_span``
        may narrow the index's span range; ``threshold`` drops matches scoring below it; ``per_document=n`` keeps at
        most ``n`` spans of a document (1: the ``top_k`` best documents); ``overlap=False`` (default) drops a span
        overlapping a better kept span of its document (no nested copies of one place). ``merge_identical=True``
        makes identical spans (:func:`slice_st.search.identity_key`: whitespace runs as one, case-folded, edge
        punctuation left out) one result, the best, whose ``places`` lists each one ranked above the last result;
        ``top_k`` then counts distinct spans (more are searched while copies fill the list, at most ``merge_limit``
        a query, default all), in the order without it.
        Each match has its ``confidence`` (:mod:`slice_st.confidence`) when the model is shipped and the scorer its
        default; ``min_confidence`` leaves out the matches below it (``"default"``: the model's documented cut; fewer
        than ``top_k`` may remain).

        On a compressed index (:meth:`compress`) ``candidates`` is the number of documents per query (default 500)
        that the compressed tier's approximate scan passes on to be searched exactly as above; the results are exact
        search's over those documents (``candidates >= len(index)``: all), re-encoded without the exact tier.

        ``approximate=True`` uses the FAISS candidate stage (:meth:`build_candidates`): the ``candidates`` best chunks
        (default: the stage's, 512) per query, then every span overlapping them scored exactly (only spans outside the
        candidates can be missed).

        ``scorer`` (a name of :data:`slice_st.scoring.SPAN_SCORERS` or a :class:`~slice_st.scoring.SpanScorer`)
        decides the ranking: a match's ``score`` is the span's ``cosine`` minus the scorer's costs (length against the
        query's, function-word starts and ends, cut noun phrases, clause marks and sentence ends crossed). The default
        ``"reranked"`` takes exactly the best documents by their best ``"phrase"`` span, then picks each one's spans as
        :func:`slice_st.best_spans` picks them in its text; ``"max-cosine"`` ranks by the cosine alone (the paper's).

        Still exact with costs, the cap and the filter, as no cost is negative: the scan takes the ``M`` best spans by
        cosine and ranks them; when the ``top_k``-th kept score is at least the lowest cosine scanned, no span left
        out can enter, else ``M`` grows 4x (until every span was ranked, or the lowest cosine is below ``threshold``).
        """
        wanted = check_search(self.span_config, top_k, per_document, min_span, max_span, candidates)
        self.check_approximate(approximate)
        threshold = check_threshold(threshold)
        merge_limit = check_top_k(merge_limit, "merge_limit", True)
        scorer, overlap = search_scorer(scorer, self.model), check_overlap(overlap)
        calibrator, min_confidence = search_calibrator(self.model, scorer, min_confidence)
        query_texts = query_list(queries)
        prompts = dict(prompt_name=prompt_name, prompt=prompt, device=device)
        vectors = self.embed_queries(query_texts, batch_size=batch_size, **prompts)
        unit = self.span_config.unit
        profiles = None if scorer.is_plain else profiles_of(self.model, unit, query_texts)
        options = dict(threshold=threshold, per_document=per_document, scorer=scorer)
        options["overlap"] = overlap
        search = functools.partial(
            self._search_embedded, wanted, approximate, candidates, nprobe, options
        )
        if not check_merge_identical(merge_identical):
            found = search(query_texts, vectors, profiles, top_k)
        else:
            most = merge_limit or self.num_units * (wanted.max_span - wanted.min_span + 1)
            found = search_merged(search, query_texts, vectors, profiles, top_k, most)
        return with_confidence(found, query_texts, calibrator, min_confidence)

    def _search_embedded(
        self,
        wanted,
        approximate,
        candidates,
        nprobe,
        options,
        query_texts,
        vectors,
        profiles,
        top_k,
    ):
        """:meth:`search` of embedded queries: through the compressed tier, or over this index's arrays."""
        options = options | {"top_k": top_k}
        if self._compressed is not None and not approximate:
            return self._two_tier_search(
                query_texts, vectors, profiles, wanted, candidates, options
            )
        return self._search_vectors(
            query_texts, vectors, profiles, wanted, approximate, candidates, nprobe, **options
        )

    def _two_tier_search(
        self, query_texts, vectors, profiles, wanted: SpanConfig, candidates, options, docs=None
    ):
        """Each query's ``candidates`` best documents by the compressed scan (or ``docs`` ``(Q, n)`` given), searched
        exactly (the exact tier)."""
        count = candidates or DEFAULT_CANDIDATES
        if docs is None and count >= len(self):  # every document: one exact search
            every = self if self.exact_tier else self._documents(np.arange(len(self)), widen=True)
            return every._search_vectors(
                query_texts, vectors, profiles, wanted, False, None, None, **options
            )
        if docs is None:
            built_min = self.span_config.min_span
            docs = self._compressed.best_documents(
                vectors, self.arrays, len(self), count, wanted.min_span, wanted.max_span, built_min
            )
        return self._search_candidates(docs, query_texts, vectors, profiles, wanted, options)

    def _search_candidates(self, docs, query_texts, vectors, profiles, wanted, options):
        """Each query's candidate documents (``docs`` ``(Q, n)`` positions, ``-1``: none) searched exactly as one
        index of them, their rows read from the exact tier; matches numbered as in this index. Without the exact
        tier, the candidates of a group of queries are re-encoded at once (each document once per group)."""
        if self.exact_tier:
            return SpanIndex._search_exact_candidates(
                self, docs, query_texts, vectors, profiles, wanted, options
            )
        results: list[list[IndexMatch]] = []
        for group in _query_groups(docs, REENCODED_DOCUMENTS):
            union = np.unique(docs[group][docs[group] >= 0])
            encoded = self._documents(union, widen=True)  # searched as the exact tier
            local = np.where(docs[group] >= 0, np.searchsorted(union, docs[group]), -1)
            part = None if profiles is None else profiles[group]
            found = SpanIndex._search_exact_candidates(
                encoded, local, query_texts[group], vectors[group], part, wanted, options
            )
            results.extend(
                _renumbered(matches, group.start + query, union)
                for query, matches in enumerate(found)
            )
        return results

    def _search_exact_candidates(self, docs, query_texts, vectors, profiles, wanted, options):
        """:meth:`_search_candidates` of an index that keeps its exact tier: each query's rows read from it."""
        results = []
        for query, found in enumerate(docs):
            chosen = np.sort(found[found >= 0])
            if not len(chosen):
                results.append([])
                continue
            rows = slice(query, query + 1)
            part = profiles[rows] if profiles is not None else None
            with self._scratch.borrowed() as array:  # the sub's arrays live until its search ends
                sub = self._documents(chosen, widen=True, array=array)
                matches = sub._search_vectors(
                    query_texts[rows], vectors[rows], part, wanted, False, None, None, **options
                )[0]
            results.append(_renumbered(matches, query, chosen))
        return results

    def _documents(
        self, docs: np.ndarray, widen: bool = False, array: storage.ArrayMaker = storage.fresh_array
    ) -> SpanIndex:
        """An exact index (sharing the model) of the documents at positions ``docs`` (sorted), its unit rows read from
        the exact tier (or re-encoded) into arrays from ``array`` (a Scratch's: valid while borrowed); ``widen``:
        float16 rows as float32, cast once for a search's scans rather than block by block in each."""
        segments, rows = candidate_rows(self.arrays, docs)
        arrays, bounds = self.arrays, np.asarray(self.arrays["segment_units"], dtype=np.int64)
        position = np.full(len(self.doc_ids), -1, dtype=np.int64)
        position[docs] = np.arange(len(docs))
        sub = copy.copy(self)
        sub._compressed = sub._candidates = sub._origin = sub._unit_files = None
        names = [name for name in storage.UNIT_ARRAYS if name in self.arrays]
        read = {name: self._unit_rows(name, rows, array) for name in names}
        sub.arrays = {
            name: _widened(values, array, (name, "wide")) if widen else values
            for name, values in read.items()
            if values is not None
        } | {
            "segment_units": offsets_of(bounds[segments + 1] - bounds[segments]),
            "segment_docs": position[np.asarray(arrays["segment_docs"])[segments]],
            "segment_first_unit": np.asarray(arrays["segment_first_unit"])[segments],
        }
        sub.doc_ids = [self.doc_ids[doc] for doc in docs.tolist()]
        sub.texts = [self.texts[doc] for doc in docs.tolist()]
        if not self.exact_tier:
            sub.arrays |= self._reencoded(sub.texts, sub.arrays["unit_chars"], widen)
        sub.sources = [self.sources[doc] for doc in docs.tolist()]
        # a unit's flags depend on its own document only: the stored rows are the sub's
        flags = self._unit_rows(UNIT_FLAGS, rows, array)
        if flags is not None:
            cached_unit_flags(sub, sub.arrays["unit_chars"], lambda: flags)
        return sub

    def _unit_rows(
        self, name: str, rows: np.ndarray, array: storage.ArrayMaker = storage.fresh_array
    ) -> np.ndarray | None:
        """Rows of a unit array (in an array from ``array``); of a loaded memory-mapped one, read from its file
        rather than through the map (the pages a map touches stay in the process's resident memory). ``UNIT_FLAGS``:
        the stored flags' rows, ``None`` when the index holds none that are still valid."""
        held = (self._unit_files or {}).get(name)
        read = functools.partial(array, (name, "read"))
        if held is not None and held[0] is self.arrays.get(name, self.arrays["unit_chars"]):
            return held[1].take(rows, lambda _, shape, dtype: read(shape, dtype))
        if name == UNIT_FLAGS:  # the flags computed or stored once, if any
            flags = held_unit_flags(self, self.arrays["unit_chars"])
            return None if flags is None else flags[rows]
        values = self.arrays[name]
        return np.take(values, rows, axis=0, out=read((len(rows), *values.shape[1:]), values.dtype))

    def _reencoded(self, texts: list[str], chars: np.ndarray, widen: bool) -> dict[str, np.ndarray]:
        """The unit vectors and span norms of documents ``texts`` encoded again as :meth:`add` encoded them (in the
        index's dtype; ``widen``: float16 as float32), checked to fall on their stored units ``chars``."""
        encoded = self._encode(texts, REENCODE_BATCH, self.model)
        if not np.array_equal(encoded["unit_chars"], np.asarray(chars)):
            raise IndexFileError(
                "The index's documents no longer encode to the units it holds (its model or tokenizer changed "
                "since it was built): rebuild the index."
            )
        return {
            name: _widened(encoded[name]) if widen else encoded[name]
            for name in storage.EXACT_TIER_ARRAYS
        }

    def _search_vectors(
        self,
        query_texts,
        vectors,
        profiles,
        wanted: SpanConfig,
        approximate,
        candidates,
        nprobe,
        *,
        top_k,
        threshold,
        per_document,
        scorer,
        overlap,
    ) -> list[list[IndexMatch]]:
        """:meth:`search` of embedded queries over this index's arrays (exact, or through the FAISS stage)."""
        held = self.num_units * (wanted.max_span - wanted.min_span + 1)  # no scan goes past them
        found = ranked(
            self.scanner(wanted, approximate, candidates, nprobe),
            self.to_matches,
            vectors,
            top_k,
            threshold,
            per_document,
            held,
            costs=span_costs_for(scorer, profiles, self.unit_flags),
            locate=self.locate,
            overlap=overlap,
        )
        return rerank_matches(
            self, found, query_texts, vectors, profiles, scorer, wanted, overlap, threshold
        )

    def check_approximate(self, approximate: bool) -> None:
        if approximate:
            self.require_exact_tier("approximate search (the FAISS candidate stage)")
        if approximate and self._candidates is None:
            raise SpanInputError(
                "approximate search needs a candidate stage: call build_candidates() first."
            )

    def unit_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """Scorer flags of every unit row and their mark prefix, computed from the texts once while the arrays stay
        (a saved compressed index holds them)."""

        def compute() -> np.ndarray:
            stored = self._unit_rows(UNIT_FLAGS, np.arange(self.num_units))
            return index_unit_flags(self.texts, self.arrays) if stored is None else stored

        return cached_unit_flags(self, self.arrays["unit_chars"], compute)

    def locate(
        self, units: np.ndarray, lengths: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Spans (start unit rows, lengths) as ``(document, first unit, end unit)`` in their documents' unit numbers."""
        arrays = self.arrays
        units = np.asarray(units, dtype=np.int64)
        segments = np.searchsorted(arrays["segment_units"], units, side="right") - 1
        starts = np.asarray(arrays["segment_units"])[segments]
        first = np.asarray(arrays["segment_first_unit"])[segments] + units - starts
        docs = np.asarray(arrays["segment_docs"])[segments]
        return docs, first, first + np.asarray(lengths, dtype=np.int64)

    def scanner(
        self, wanted: SpanConfig, approximate: bool, candidates: int | None, nprobe: int | None
    ):
        """``scan(query_vectors, k) -> (scores, units, lengths)``, each ``(Q, k)``: exact, or through FAISS."""
        if approximate:
            return lambda queries, k: self._candidates.top_spans(
                self, queries, k, wanted.min_span, wanted.max_span, candidates, nprobe
            )
        return lambda queries, k: self.top_spans(queries, k, wanted.min_span, wanted.max_span)

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
        prompt = resolve_prompt(self.model, prompt, prompt_name, "query")
        vectors = embed_texts(
            self.model, list(queries), batch_size=batch_size, prompt=prompt, device=device
        )
        return torch.nn.functional.normalize(vectors.float().cpu(), dim=-1)

    def top_spans(
        self,
        queries: torch.Tensor,
        top_k: int,
        min_span: int,
        max_span: int,
        floor: np.ndarray | None = None,
    ):
        """Exact top-k spans (:func:`slice_st.spans.top_spans_flat`): ``(Q, k)`` numpy scores, start units (array rows)
        and lengths; ``floor`` ``(Q,)``: spans scoring at or below it may be left out."""
        vectors = as_tensor(self.arrays["unit_vectors"])
        norms = as_tensor(self.arrays["span_norms"])
        below = None if floor is None else torch.from_numpy(np.asarray(floor, dtype=np.float64))
        low = self.span_config.min_span  # the norms' first span length
        found = top_spans_flat(
            queries, vectors, norms, top_k, min_span, max_span, norm_min_span=low, floor=below
        )
        return found.scores.numpy(), found.starts.numpy(), found.lengths.numpy()

    def to_matches(
        self, query_index: int, scores, units, lengths, threshold: float | None, cosines=None
    ) -> list[IndexMatch]:
        """Matches of spans (start unit rows, lengths) with their scores and cosines (``None``: the scores)."""
        scores = np.asarray(scores)
        keep = np.isfinite(scores) & (True if threshold is None else scores >= threshold)
        cosines = scores[keep] if cosines is None else np.asarray(cosines)[keep]
        units, lengths = np.asarray(units)[keep], np.asarray(lengths)[keep]
        chars = self.arrays["unit_chars"]
        docs, firsts, ends = self.locate(units, lengths)
        matches = []
        for i, (score, cosine) in enumerate(zip(scores[keep], cosines)):
            doc = int(docs[i])
            start, end = int(chars[units[i], 0]), int(chars[units[i] + lengths[i] - 1, 1])
            match = IndexMatch(
                query_index=query_index,
                doc_id=self.doc_ids[doc],
                text_index=doc,
                start=start,
                end=end,
                span=self.texts[doc][start:end],
                score=float(score),
                unit_start=int(firsts[i]),
                unit_end=int(ends[i]),
                calibrated=calibrated_degree(self.calibration, cosine),
                similarity=float(cosine),
            )
            matches.append(match)
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
        """Where along one document the query peaks: ``(chars, scores)``, each unit's character offsets ``(U, 2)`` and
        the cosine of the best span of ``min_span..max_span`` units covering it ``(U,)`` (``-inf`` where none does;
        ``None`` when ``query`` is ``None``)."""
        wanted = check_search(self.span_config, 1, None, min_span, max_span, None)
        if not isinstance(doc_id, str) or doc_id not in self.doc_ids:
            raise SpanInputError(f"Unknown document id {doc_id!r:.80}.")
        position = self.doc_ids.index(doc_id)
        if not self.exact_tier:  # the document encoded again
            sub = self._documents(np.array([position]), widen=True)
            options = dict(prompt_name=prompt_name, prompt=prompt)
            return sub.unit_profile(query, doc_id, wanted.min_span, wanted.max_span, **options)
        arrays, bounds = self.arrays, np.asarray(self.arrays["segment_units"])
        segments = np.flatnonzero(np.asarray(arrays["segment_docs"]) == position)
        rows = ranges_to_indices(bounds[segments], bounds[segments + 1])
        doc_units = self.locate(rows, rows)[1]  # the units' numbers in the document
        count = int(doc_units.max()) + 1 if len(doc_units) else 0
        chars = np.zeros((count, 2), dtype=np.int64)
        chars[doc_units] = np.asarray(arrays["unit_chars"][rows])
        if query is None:
            return chars, None
        vector = self.embed_queries(query_list(query)[:1], prompt_name=prompt_name, prompt=prompt)
        vectors = torch.from_numpy(np.asarray(arrays["unit_vectors"][rows], dtype=np.float32))
        norms = torch.from_numpy(np.asarray(arrays["span_norms"][rows], dtype=np.float32))
        scores = unit_peak_scores(
            vector @ vectors.T,
            norms,
            wanted.min_span,
            wanted.max_span,
            norm_min_span=self.span_config.min_span,
        )[0]
        best = np.full(count, -np.inf)
        # overlapping windows share units: each keeps its best
        np.maximum.at(best, doc_units, scores.numpy())
        return chars, best

    def info(self) -> dict[str, Any]:
        """What the index holds and what it costs in memory (and what materialised float32 span vectors would)."""
        arrays, config, calibration = self.arrays, self.span_config, self.calibration
        dim, spans = token_dimension(self.model), self._span_count()
        array_bytes = int(sum(np.asarray(values).nbytes for values in arrays.values()))
        tier = None if self._compressed is None else self._compressed.info()
        segment_bytes = sum(np.asarray(arrays[name]).nbytes for name in storage.ARRAYS[3:-1])
        version = (
            storage.INDEX_FORMAT_VERSION if tier is None else storage.COMPRESSED_FORMAT_VERSION
        )
        return {
            "format_version": version if self.exact_tier else storage.NO_EXACT_TIER_FORMAT_VERSION,
            "exact_tier": self.exact_tier,
            "documents": len(self.doc_ids),
            "segments": len(arrays["segment_docs"]),
            "units": self.num_units,
            "spans": spans,
            "unit": config.unit,
            "min_span": config.min_span,
            "max_span": config.max_span,
            "dimension": dim,
            "dtype": self.dtype,
            "array_bytes": array_bytes,
            # what a search keeps in memory: every array, or the compressed tier and the segment table
            "resident_bytes": array_bytes
            if tier is None
            else int(tier["resident_bytes"] + segment_bytes),
            "materialised_span_bytes": int(spans * dim * 4),
            "model_name": self.model_name,
            "model_path": self.model_path,
            "model_fingerprint": self.fingerprint,
            "model_backend": self.model_runtime.get("backend", "torch"),
            "model_file": self.model_runtime.get("model_file"),
            "calibration": None
            if calibration is None
            else {
                key: getattr(calibration, key)
                for key in ("pair_score", "source", "pairs", "spearman")
            },
            "candidates": None if self._candidates is None else self._candidates.info(),
            "compression": tier,
        }

    def _span_count(self) -> int:
        """The spans the index holds: finite span norms (without the exact tier, norm codes that are not "none")."""
        if not self.exact_tier:
            assert self._compressed is not None  # an index without the exact tier is compressed
            return self._compressed.span_count()
        norms = self.arrays["span_norms"]
        return sum(
            int(np.isfinite(norms[i : i + FLAT_BLOCK_UNITS]).sum())
            for i in range(0, len(norms), FLAT_BLOCK_UNITS)
        )

    def save(
        self, path: str | os.PathLike, *, overwrite: bool = True, timeout: float | None = 0
    ) -> str:
        """Write the index to a folder, atomically (the previous version stays until the new one is complete).

        Saves to one folder are serialised by its writer lock: another process saving there makes this one wait up to
        ``timeout`` seconds (0: not at all, ``None``: as long as it takes), then :class:`IndexBusyError`. An index
        loaded from ``path`` is saved back only if nobody saved there since (else :class:`IndexConflictError`; see
        :meth:`open_for_update`). ``overwrite=False`` refuses to replace an index this one was not loaded from.
        """
        path = os.fspath(path)
        with storage.index_lock(path, timeout=timeout):
            try:
                current = storage.read_manifest(path, must_exist=False)
            except SpanInputError:
                current = None  # an unreadable manifest: nothing to keep or to check against
            loaded_here = self._origin is not None and self._origin[0] == os.path.realpath(path)
            if (
                current is not None
                and loaded_here
                and (current["data"], current["generation"]) != self._origin[1:]
            ):
                raise IndexConflictError(
                    f"{path} was saved by another process after this index was loaded from it (now "
                    f"{current['documents']} documents, data {current['data']}): saving would lose that change. "
                    "Load the index again and redo yours (SpanIndex.open_for_update holds the directory from load "
                    "to save)."
                )
            if current is not None and not overwrite and not loaded_here:
                raise SpanInputError(
                    f"{path} already holds an index: add to it, or replace it explicitly (overwrite=True, --force)."
                )
            generation = current["generation"] + 1 if current is not None else 1
            manifest = self.info() | {"span_config": self.span_config.to_dict()}
            data = storage.commit_data(
                path, generation, self._write_data, manifest, current and current["data"]
            )
            self._origin = (os.path.realpath(path), data, generation)
        return path

    def _write_data(self, data_dir: str) -> dict[str, str]:
        """Write the index's files into a new data folder; returns the arrays' sample checksums."""
        encoded = [text.encode("utf-8") for text in self.texts]
        offsets = offsets_of([len(b) for b in encoded])
        samples = {}
        for name, values in [*self.arrays.items(), ("text_offsets", offsets)]:
            values = np.asarray(values)
            storage.save_array(os.path.join(data_dir, f"{name}.npy"), values)
            samples[name] = storage.array_digest(values)
        files = {
            "texts.bin": b"".join(encoded),
            "doc_ids.json": json.dumps(self.doc_ids, ensure_ascii=False).encode(),
            storage.SETTINGS_FILE: json.dumps(self._settings()).encode(),
        }
        # else each id names its file
        if self.sources != [_source(doc_id) for doc_id in self.doc_ids]:
            files[SOURCES_FILE] = json.dumps(self.sources, ensure_ascii=False).encode()
        if self.calibration is not None:
            files[CALIBRATION_FILE] = json.dumps(self.calibration.to_dict(), indent=1).encode()
        for name, data in files.items():
            storage.write_bytes(os.path.join(data_dir, name), data)
        if self._candidates is not None:
            self._candidates.save(data_dir)
        if self._compressed is not None:
            samples |= self._compressed.save(data_dir)
            # the scorer's flags of every unit, so a search reads its candidates' instead of recomputing them
            flags = self.unit_flags()[0]
            storage.save_array(os.path.join(data_dir, f"{UNIT_FLAGS}.npy"), flags)
            samples[UNIT_FLAGS] = storage.array_digest(flags)
        return samples

    def _settings(self) -> dict[str, Any]:
        """What the arrays were written with (``settings.json``, checked against the manifest on load)."""
        settings = {
            "span_config": self.span_config.to_dict(),
            "dtype": self.dtype,
            "model_fingerprint": self.fingerprint,
        }
        settings |= {} if self._compressed is None else {"compression": str(self._compressed.spec)}
        return settings | ({} if self.exact_tier else {"exact_tier": False})

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
        """Load the index at ``path`` holding its writer lock, yield it, and save it when the block ends without error
        (an error saves nothing), so concurrent updates all land. Another writer makes this wait ``timeout`` seconds
        (``None``: as long as it takes; ``on_wait(holder)`` is called first).

        >>> with SpanIndex.open_for_update("runs/corpus-index") as index:     # doctest: +SKIP
        ...     index.add(["a new document"], ["doc-9"])
        """
        path = os.fspath(path)
        # the clear error for a missing, half-made or unreadable index
        storage.read_manifest(path, must_exist=True)
        # a read-only folder: said before loading
        with storage.index_lock(path, timeout=timeout, on_wait=on_wait):
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
        if (
            os.path.exists(os.path.join(output, storage.MANIFEST))
            and not force
            and output not in paths
        ):
            raise SpanInputError(f"{output} already holds an index: use --force to replace it.")
        with storage.index_lock(output, timeout=None, on_wait=on_wait):
            first = cls.load(paths[0])
            merged = cls.merge([first] + [cls.load(path, first.model) for path in paths[1:]])
            merged.model_name, merged.model_path = first.model_name, first.model_path
            merged.save(output)
        return merged

    @classmethod
    def describe(cls, path: str | os.PathLike, *, verify: bool = False) -> dict[str, Any]:
        """What a saved index holds (its manifest's summary, bytes per unit); ``verify`` loads it and checks every
        file's SHA-256 (raising on any mismatch)."""
        manifest = storage.read_manifest(os.fspath(path), must_exist=True)
        internal = ("span_config", "files", "samples")
        info = {key: value for key, value in manifest.items() if key not in internal}
        # not recorded before format 4
        info["exact_tier"] = info.get("exact_tier", True) is not False
        array_bytes, units = info.get("array_bytes") or 0, max(int(info.get("units") or 0), 1)
        info["bytes_per_unit"] = round(array_bytes / units, 1)
        # a search's memory: a compressed index keeps its tier only
        if info.get("resident_bytes") is not None:
            info["resident_bytes_per_unit"] = round(info["resident_bytes"] / units, 1)
        info["smaller_than_materialised"] = round(
            (info.get("materialised_span_bytes") or 0) / max(array_bytes, 1), 1
        )
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
        """Open a saved index (arrays memory-mapped) with the model it was built with.

        Every load checks the files' sizes, the small files' checksums and a sample of every array's rows; a load that
        races a save returns the old or the new index, never an error.

        Args:
            path: The index folder.
            model: The model it was built with, or its path / Hub id (default: the one the index recorded, on the
                backend and exported file it was built with unless ``backend`` is given).
            mmap: Memory-map the arrays.
            verify: Check every file's SHA-256.
            device: Where a model loaded here runs.
            **model_options: :func:`slice_st.load_model`'s (``backend``, ``model_file``, ``threads``…).
        """
        path = os.fspath(path)
        manifest = storage.read_manifest(path, must_exist=True)
        recorded = manifest.get("model_backend", "torch")
        # the same exported file
        if model is None and recorded != "torch" and "backend" not in model_options:
            model_options.update(
                backend=recorded,
                model_file=model_options.get("model_file") or manifest.get("model_file"),
            )
        model = _as_model(
            model_source(path, manifest) if model is None else model, device=device, **model_options
        )
        read = functools.partial(cls._read_data, path, model=model, mmap=mmap, verify=verify)
        index, manifest = storage.read_consistent(path, manifest, read)
        index._origin = (os.path.realpath(path), manifest["data"], manifest.get("generation"))
        return index

    @classmethod
    def _read_data(
        cls,
        path: str,
        manifest: dict[str, Any],
        model: SentenceTransformer,
        mmap: bool,
        verify: bool,
    ) -> SpanIndex:
        """The index one manifest names; ``OSError``/``ValueError`` if its data folder is missing or does not match."""
        index = cls(model, SpanConfig(**manifest["span_config"]), manifest["dtype"])
        if index.fingerprint != manifest["model_fingerprint"]:
            raise SpanInputError(
                f"{path} was built with another model (fingerprint {manifest['model_fingerprint']}, "
                f"name {manifest.get('model_name') or 'unknown'!r}); this model's fingerprint is {index.fingerprint}. "
                "Load it with the model it was built with, or rebuild the index."
            )
        with storage.DataFolder.open(path, manifest, verify) as data:
            stored, recorded = data.json(storage.SETTINGS_FILE), index._settings()
            stored = stored if isinstance(stored, dict) else {}
            changed = [key for key in recorded if stored.get(key) != recorded[key]]
            if changed:  # the manifest was edited after the data folder was written
                raise IndexFileError(
                    f"{path}: the manifest's {', '.join(changed)} ({', '.join(f'{recorded[key]}' for key in changed)}) "
                    "do not match what the index data was written with "
                    f"({', '.join(f'{stored.get(key)}' for key in changed)}): the manifest was edited. "
                    "Restore it or rebuild the index."
                )
            arrays = {name: data.array(name, mmap) for name in storage.stored_arrays(manifest)}
            doc_ids, texts, sources = _read_documents(data, manifest, arrays.pop("text_offsets"))
            bounds, units = arrays["segment_units"], manifest["units"]
            if (
                len(doc_ids) != manifest["documents"]
                or any(
                    arrays[name].shape != (units, index.arrays[name].shape[1])
                    for name in storage.UNIT_ARRAYS
                    if name in arrays
                )
                or len(bounds) != len(arrays["segment_docs"]) + 1
                or bounds[-1] != units
            ):
                raise ValueError(CORRUPT)
            index.arrays = arrays
            index._unit_files = _unit_files(data, manifest, arrays)
            if manifest.get("calibration"):
                index.calibration = Calibration.from_dict(
                    data.json(CALIBRATION_FILE), CALIBRATION_FILE
                )
            if manifest.get("candidates"):
                index._candidates = CandidateStage.load(data, manifest["candidates"])
            if manifest.get("compression"):
                index._compressed = CompressedTier.load(data, manifest["compression"], units)
        index.doc_ids, index.texts, index.sources = doc_ids, texts, sources
        index.model_name = manifest.get("model_name") or index.model_name
        index.model_path = manifest.get("model_path", index.model_path)
        return index


def _read_documents(
    data: storage.DataFolder, manifest: dict[str, Any], offsets: np.ndarray
) -> tuple[list[str], list[str], list[str]]:
    """A data folder's document ids, texts (cut at ``offsets``) and files; ``ValueError`` if they do not match."""
    doc_ids, blob = data.json("doc_ids.json"), data.bytes("texts.bin")
    sources = data.json(SOURCES_FILE) if SOURCES_FILE in manifest["files"] else None
    offsets = np.asarray(offsets, dtype=np.int64)
    if (
        not isinstance(doc_ids, list)
        or len(offsets) != len(doc_ids) + 1
        or offsets[-1] != len(blob)
    ):
        raise ValueError(CORRUPT)
    if sources is not None and (
        len(sources) != len(doc_ids) or not all(isinstance(s, str) for s in sources)
    ):
        raise ValueError(f"{SOURCES_FILE} does not match the documents")
    bounds = zip(offsets[:-1].tolist(), offsets[1:].tolist())
    texts = [blob[start:end].decode("utf-8") for start, end in bounds]
    return doc_ids, texts, sources if sources is not None else [_source(d) for d in doc_ids]


def check_alike(indexes: Sequence[Any], what: str, caller: str) -> list[SpanIndex]:
    """``indexes`` as a list (``what``: ``"index"`` or ``"shard"``); any built with another model or span settings
    (an index: or dtype), or a document id in two of them, is refused."""
    indexes, seen, name = list(indexes), set(), what.capitalize()
    if not indexes:
        raise SpanInputError(f"{caller} needs at least one {what}.")
    first = indexes[0]
    for position, other in enumerate(indexes):
        if not isinstance(other, SpanIndex):
            raise SpanInputError(f"{name} {position} is a {type(other).__name__}, not a SpanIndex.")
        if other.fingerprint != first.fingerprint:
            raise SpanInputError(
                f"{name} {position} was built with another model (fingerprint {other.fingerprint} != "
                f"{first.fingerprint})."
            )
        mine, firsts = (
            (i.span_config, i.dtype) if what == "index" else i.span_config for i in (other, first)
        )
        if mine != firsts:
            label = "settings" if what == "index" else "span settings"
            raise SpanInputError(
                f"{name} {position} has other {label} {mine} than {what} 0 {firsts}."
            )
        for doc_id in other.doc_ids:
            if doc_id in seen:
                raise SpanInputError(
                    f"Duplicate document id {doc_id!r}: it is in more than one {what} ({what} {position} and an "
                    "earlier one)."
                )
            seen.add(doc_id)
    return indexes


def _check_exact_tier(exact_tier: Any, compression: str | None, engine: str) -> None:
    """:meth:`SpanIndex.build`'s ``exact_tier``: a bool, ``False`` only with ``compression`` on the local engine."""
    if exact_tier not in (True, False):
        raise SpanInputError(f"exact_tier must be True or False, got {exact_tier!r:.40}.")
    if not exact_tier and compression is None:
        raise SpanInputError(
            "exact_tier=False (--no-exact-tier) needs a compressed tier (compression=..., --compress): an "
            "index without it and its exact tier holds no vectors to search."
        )
    if not exact_tier and engine == "ray":
        raise SpanInputError(
            "exact_tier=False is not available with engine='ray'; build on Ray, then merge or compress locally."
        )


def _check_exact_tiers_merge(indexes: Sequence[SpanIndex]) -> None:
    """:meth:`SpanIndex.merge` of indexes without the exact tier: all of them so, coded with the same codebooks."""
    kept = [index.exact_tier for index in indexes]
    if all(kept):
        return
    if any(kept):
        raise ExactTierError(
            f"Index {kept.index(not kept[0])} {'keeps' if kept[0] else 'lacks'} the exact tier and index 0 does "
            "not: merge indexes that all keep it or all lack it (merging codes units from their vectors)."
        )
    digests = {index._compressed.codebook_digest() for index in indexes if index._compressed}
    if len(digests) > 1:
        raise ExactTierError(
            "Indexes without the exact tier merge only when coded with the same codebooks (coding the others' "
            "units needs their vectors): build them with compress(codebooks=...) from one index."
        )


def _query_groups(docs: np.ndarray, most: int) -> Iterator[slice]:
    """Consecutive queries (rows of ``docs``, ``-1``: none) whose candidate documents number at most ``most``
    together (or one query)."""
    start, seen = 0, set[int]()
    for query, found in enumerate(docs):
        mine = set(found[found >= 0].tolist())
        if query > start and len(seen | mine) > most:
            yield slice(start, query)
            start, seen = query, set()
        seen |= mine
    if len(docs) > start:
        yield slice(start, len(docs))


def _renumbered(matches: list[IndexMatch], query: int, docs: np.ndarray) -> list[IndexMatch]:
    """Matches in an index of the documents ``docs`` as numbered in the whole index, of query ``query``."""
    return [
        dataclasses.replace(m, query_index=query, text_index=int(docs[m.text_index]))
        for m in matches
    ]


def _document_rows(
    doc_ids: Sequence[str], sources: Sequence[str], lengths: Iterable[int], arrays: dict[str, Any]
) -> list[dict[str, Any]]:
    """:meth:`SpanIndex.documents`: rows of ids, files, lengths in characters, and units counted from the segments."""
    bounds = np.asarray(arrays["segment_units"], dtype=np.int64)
    docs = np.asarray(arrays["segment_docs"], dtype=np.int64)
    units = (
        np.bincount(docs, weights=np.diff(bounds), minlength=len(doc_ids)).astype(np.int64).tolist()
    )
    return [
        {"id": doc_id, "file": source or None, "characters": length, "units": count}
        for doc_id, source, length, count in zip(doc_ids, sources, lengths, units)
    ]


def _unit_files(data: storage.DataFolder, manifest: dict[str, Any], arrays) -> dict[str, tuple]:
    """Each memory-mapped unit array loaded with its :class:`~slice_st.index.storage.FileRows`; a compressed index's
    stored unit flags too, valid while the unit rows are those loaded (``add`` and ``remove`` replace them)."""
    files = {
        name: (arrays[name], data.rows[name]) for name in storage.UNIT_ARRAYS if name in data.rows
    }
    if manifest.get("compression") and f"{UNIT_FLAGS}.npy" in manifest["files"]:
        flags = data.array(UNIT_FLAGS, True)
        if flags.shape != (manifest["units"],):
            raise ValueError("the unit flags do not match the index's units")
        if UNIT_FLAGS in data.rows:
            files[UNIT_FLAGS] = (arrays["unit_chars"], data.rows[UNIT_FLAGS])
    return files


def _widened(
    values: np.ndarray, array: storage.ArrayMaker = storage.fresh_array, key: Any = "wide"
) -> np.ndarray:
    """float16 values as float32 (by torch: numpy's conversion of small float16 values is several times slower), in
    the array ``array`` makes for ``key``."""
    if values.dtype != np.float16:
        return values
    wide = array(key, values.shape, np.float32)
    torch.from_numpy(wide).copy_(torch.from_numpy(np.ascontiguousarray(values)))
    return wide


def _source(doc_id: str, given: str = "") -> str:
    """A document's file: ``given`` (a Document's source) normalised, else the file its id ``<path>:<line>`` names."""
    if given:
        return given if given == "-" else os.path.normpath(given)
    return file_of_id(doc_id) or ""


def _check_not_indexed_yet(doc_ids: Sequence[str], documents: Sequence[Any]) -> None:
    """Refuse a file already indexed under another spelling of its path (``a.txt`` vs ``/abs/a.txt``, a link)."""
    sources = {
        d.source
        for d in documents
        if isinstance(d, Document)
        and d.source
        and d.source != "-"
        and d.id == f"{os.path.normpath(d.source)}:{d.line}"
    }
    if not sources:
        return
    paths = dict.fromkeys(
        doc_id.rpartition(":")[0] for doc_id in doc_ids if doc_id.rpartition(":")[2].isdigit()
    )
    # real path → the first spelling it was indexed under, for ids <path>:<line>
    indexed = {
        os.path.realpath(path): path for path in reversed(paths) if path and os.path.isfile(path)
    }
    for source in sorted(sources):
        spelling = indexed.get(os.path.realpath(source))
        if spelling is not None and os.path.normpath(spelling) != os.path.normpath(source):
            raise SpanInputError(
                f"{source} is already in the index as {spelling} (the same file): remove those documents first, "
                "or give the file as it was indexed."
            )


def _as_model(model: Any, **options: Any) -> SentenceTransformer:
    """A model object, or one loaded from a path / Hub id with ``options`` (``None``: the default model); a folder of
    a ``MultiVectorEncoder`` checkpoint (ColBERT, PyLate) as one."""
    from slice_st.loading import load_model
    from slice_st.multi_vector import load_multi_vector_folder

    found = load_multi_vector_folder(model, **options)
    if found is not None:
        return found  # type: ignore[return-value]  # duck-typed alike
    if model is None or isinstance(model, (str, os.PathLike)):
        return load_model(model if model is None else os.fspath(model), **options)
    if not callable(getattr(model, "encode", None)) or not hasattr(model, "tokenizer"):
        raise SpanInputError(
            f"model must be a SentenceTransformer, a model folder or a Hub id, got {type(model).__name__}."
        )
    return model


def model_runtime(model: SentenceTransformer) -> dict[str, str]:
    """What :func:`slice_st.load_model` needs to load a model on ONNX Runtime / OpenVINO again (``{}`` on torch)."""
    runner = runner_of(model)
    if runner is None:
        return {}
    _, folder = model_identity(model)
    path = os.path.abspath(runner.path)
    if folder and os.path.commonpath([path, os.path.abspath(folder)]) == os.path.abspath(folder):
        path = os.path.relpath(path, folder)
    return {"backend": backend_of(model), "model_file": path}


def model_source(index_path: str, manifest: dict[str, Any]) -> str | None:
    """What to load for an index opened without a model: its recorded path, else name (None: the default model)."""
    if model_path := manifest.get("model_path"):
        if os.path.isdir(model_path):
            return model_path
        raise SpanInputError(
            f"{index_path} was built with the model at {model_path!r} ({manifest.get('model_name') or 'unnamed'}), "
            "which is not there any more: pass the model (model=..., --model)."
        )
    name = manifest.get("model_name") or None  # a shipped name: never a ./slice-minilm folder here
    return f"slice-st/{name}" if name and is_shipped_model_name(f"slice-st/{name}") else name
