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

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from slice_st.calibration import CALIBRATION_FILE, Calibration
from slice_st.config import SpanConfig, get_span_config
from slice_st.corpus import Document
from slice_st.encode import (
    SpanInputError,
    _as_text_list,
    _encode_windows,
    _model_window,
    _span_config,
    _token_dimension,
    embed_texts,
)
from slice_st.spans import span_sum_norms, top_spans_flat, top_spans_from_dots, unit_sums
from slice_st.tokens import plan_windows

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["SpanIndex", "ShardedSpanIndex", "IndexMatch", "model_fingerprint", "model_identity", "shard_directories", "INDEX_FORMAT_VERSION"]

INDEX_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
_ARRAYS = ("unit_vectors", "unit_chars", "span_norms", "segment_units", "segment_docs", "segment_first_unit", "text_offsets")
#: Units scored per block: bounds the (block, Q) float64 buffers and resets the prefix sums.
SEARCH_BLOCK_UNITS = 1 << 16
#: Float64 scores held per block, (queries × span lengths × units): sets the block size for many queries.
SEARCH_SCORE_BUFFER = 1 << 21
#: Documents encoded per step of :meth:`SpanIndex.add` (the progress bar moves per step).
DOCUMENTS_PER_STEP = 256


def model_fingerprint(model: SentenceTransformer) -> str:
    """A short hash of the model's weights and tokenizer, to refuse indexes built with another model."""
    digest = hashlib.sha256()
    tokenizer = model.tokenizer
    digest.update(f"{type(tokenizer).__name__}:{len(tokenizer) if tokenizer is not None else 0}".encode())
    parameters = list(model.parameters())
    for parameter in parameters[:2] + parameters[-2:]:
        values = parameter.detach().float().flatten()[:4096].cpu().numpy()
        digest.update(str(tuple(parameter.shape)).encode())
        digest.update(np.round(values, 5).tobytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class IndexMatch:
    """One span found in the corpus: ``text[start:end] == span`` for the document ``doc_id``."""

    query_index: int
    doc_id: str
    doc_index: int
    start: int
    end: int
    span: str
    score: float
    unit_start: int
    unit_end: int
    #: The cosine on the STS 0–5 scale when the index has a calibration (:meth:`SpanIndex.set_calibration`).
    calibrated: float | None = None


def _empty_arrays(dim: int, width: int, dtype: np.dtype) -> dict[str, np.ndarray]:
    return {
        "unit_vectors": np.zeros((0, dim), dtype=dtype),
        "unit_chars": np.zeros((0, 2), dtype=np.int32),  # character offsets in the document
        "span_norms": np.zeros((0, width), dtype=np.float32),
        "segment_units": np.zeros(1, dtype=np.int64),  # unit offsets of segments, N_segments + 1
        "segment_docs": np.zeros(0, dtype=np.int64),
        "segment_first_unit": np.zeros(0, dtype=np.int64),  # first unit of the segment inside its document
    }


class SpanIndex:
    """Exact top-k span search over a corpus, with ``d + K`` stored numbers per unit.

    >>> from slice_st import SpanIndex, load_model
    >>> index = SpanIndex.build(["A man played the guitar on stage.", "The flight was late."], load_model(), max_span=5)
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
        self.doc_ids: list[str] = []
        self.texts: list[str] = []
        self.calibration: Calibration | None = None
        self.skipped: list[tuple[str, str]] = []  # (id, reason) of documents the last add(on_error="skip") left out
        self._candidates: _CandidateStage | None = None
        self._arrays = _empty_arrays(_token_dimension(model), span_config.max_span - span_config.min_span + 1, np.dtype(dtype))

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
    ) -> SpanIndex:
        """Encode ``texts`` (one forward pass each, long ones windowed) into a new index.

        ``texts`` is an iterable of strings, of :class:`slice_st.corpus.Document` (see
        :func:`slice_st.corpus.read_corpus` for text and JSONL files), or a ``datasets.Dataset``
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
        >>> index = SpanIndex.build(["The flight was late.", "My bag was lost."] * 8, load_model(), processes=2)  # doctest: +SKIP
        """
        from slice_st.config import load_model

        model = model if model is not None else load_model()
        index = cls(model, _span_config(model, min_span, max_span, unit), dtype)
        index.add(texts, ids, batch_size=batch_size, show_progress_bar=show_progress_bar, text_field=text_field, id_field=id_field,
                  on_error=on_error, devices=devices, processes=processes, pool=pool)
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
    ) -> SpanIndex:
        """Build from text files (one document per line/paragraph, id ``path:line``) or JSONL files (id and text fields)."""
        from slice_st.corpus import read_corpus

        documents = read_corpus(paths, split=split, fmt=fmt, id_field=id_field, text_field=text_field)
        return cls.build(documents, model, **options)

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
        targets = _pool_devices(devices, processes, pool)
        text_list, given_ids = _texts_and_ids(texts, text_field, id_field)
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
        if on_error == "skip":
            keep = []
            for doc_id, text in zip(ids, text_list):
                try:
                    plan_windows(self.model.tokenizer, [text], _model_window(self.model), self.span_config.max_span, 16)
                    keep.append((doc_id, text))
                except ValueError as error:
                    self.skipped.append((doc_id, str(error).replace("Text 0", f"Document {doc_id!r}")))
            if not keep:
                raise SpanInputError(f"No document could be indexed ({len(self.skipped)} skipped): {self.skipped[0][1]}")
            ids, text_list = [k[0] for k in keep], [k[1] for k in keep]
        if show_progress_bar is None:
            show_progress_bar = len(text_list) > 4 * batch_size
        pieces = []
        with _encoder(self.model, targets, pool) as encoder, tqdm(
            total=len(text_list), desc="Indexing", unit="doc", disable=not show_progress_bar
        ) as progress:
            for first in range(0, len(text_list), DOCUMENTS_PER_STEP):
                part = self._encode(text_list[first : first + DOCUMENTS_PER_STEP], batch_size, False, encoder)
                part["segment_docs"] = part["segment_docs"] + first
                pieces.append(part)
                progress.update(min(DOCUMENTS_PER_STEP, len(text_list) - first))
        new = _concat_parts(pieces)
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

    def _encode(self, texts: list[str], batch_size: int, show_progress_bar: bool | None, encoder=None) -> dict[str, np.ndarray]:
        """Segments (windows) of ``texts`` in order: unit sums, unit char offsets, span norms.

        ``encoder`` is the model, or the model seen through a multi-process pool (:func:`_encoder`).
        """
        config = self.span_config
        segments: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] = []
        for batch in _encode_windows(encoder or self.model, texts, config, batch_size, show_progress_bar, 16, "Indexing"):
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
                    segments.append((
                        window.text_index, window.char_start, sums[row, :count],
                        chars[row, :count] + window.char_start, norms[row, :count], window.first_unit(config.unit),
                    ))
        segments.sort(key=lambda segment: (segment[0], segment[1]))
        dim, width = _token_dimension(self.model), config.max_span - config.min_span + 1
        if not segments:
            return _empty_arrays(dim, width, np.dtype(self.dtype))
        return {
            "unit_vectors": np.concatenate([s[2] for s in segments]).reshape(-1, dim),
            "unit_chars": _char_offsets(np.concatenate([s[3] for s in segments]).reshape(-1, 2)),
            "span_norms": np.concatenate([s[4] for s in segments]).reshape(-1, width).astype(np.float32),
            "segment_units": np.concatenate([[0], np.cumsum([len(s[2]) for s in segments])]).astype(np.int64),
            "segment_docs": np.array([s[0] for s in segments], dtype=np.int64),
            "segment_first_unit": np.array([s[5] for s in segments], dtype=np.int64),
        }

    def remove(self, ids: Iterable[str]) -> int:
        """Drop documents by id; returns how many were removed. Unknown ids raise (nothing is removed)."""
        ids = list(ids)
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
                raise SpanInputError(f"Index {position} was built with another model (fingerprint {other.fingerprint} != {first.fingerprint}).")
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
            "segment_units": np.concatenate([[0]] + [np.asarray(p["segment_units"][1:]) + base for p, base in zip(parts, unit_bases)]).astype(np.int64),
            "segment_docs": np.concatenate([np.asarray(p["segment_docs"]) + base for p, base in zip(parts, doc_bases)]).astype(np.int64),
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
        if calibration is not None and calibration.model_fingerprint and calibration.model_fingerprint != self.fingerprint:
            raise SpanInputError(
                f"This calibration was fitted with another model (fingerprint {calibration.model_fingerprint}); "
                f"the index's model is {self.fingerprint}."
            )
        self.calibration = calibration

    # ------------------------------------------------------------------ FAISS candidate stage
    def build_candidates(
        self, kind: str = "ivf", chunk: int = 4, stride: int = 2, nlist: int | None = None, nprobe: int = 128,
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
        self._candidates = _CandidateStage.create(self._arrays, kind, chunk, stride, nlist, nprobe, candidates)

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
    ) -> list[list[IndexMatch]]:
        """For each query, the ``top_k`` spans of the whole corpus by cosine, best first.

        Exact: the same ranking and scores as materialising every span vector. ``min_span``/
        ``max_span`` may narrow the index's span range. ``threshold`` drops matches below it.

        ``approximate=True`` uses the FAISS candidate stage (:meth:`build_candidates`): the
        ``candidates`` best chunks (default: the stage's, 512) per query, then every span overlapping them is scored
        exactly (same scores as the exact search; only spans outside the candidates can be missed).

        ``per_document=n`` keeps at most ``n`` spans of each document (e.g. 1: the ``top_k`` best
        documents, each with its best span). Still exact: the scan asks for more spans (doubling)
        until ``top_k`` survive the per-document cut or every span has been ranked.
        """
        wanted = _check_search(self.span_config, top_k, per_document, min_span, max_span, candidates)
        if approximate and self._candidates is None:
            raise SpanInputError("approximate search needs a candidate stage: call build_candidates() first.")
        vectors = self.embed_queries(_query_list(queries), batch_size=batch_size)
        scan = self._scanner(wanted, approximate, candidates, nprobe)
        return _ranked(scan, self._matches, vectors, top_k, threshold, per_document)

    def _scanner(self, wanted: SpanConfig, approximate: bool, candidates: int | None, nprobe: int | None):
        """``scan(query_vectors, k) -> (scores, units, lengths)``, each ``(Q, k)``: exact, or through the FAISS stage."""
        if approximate:
            return lambda queries, k: self._candidates.top_spans(self, queries, k, wanted.min_span, wanted.max_span, candidates, nprobe)
        return lambda queries, k: self._top_spans(queries, k, wanted.min_span, wanted.max_span)

    def embed_queries(self, queries: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Unit-normalised query vectors ``(Q, d)`` float32 on CPU (the mean of each query's token vectors)."""
        return torch.nn.functional.normalize(embed_texts(self.model, list(queries), batch_size=batch_size).float().cpu(), dim=-1)

    def _top_spans(self, queries: torch.Tensor, top_k: int, min_span: int, max_span: int, floor: np.ndarray | None = None):
        """Exact top-k spans over the whole index: ``(Q, k)`` numpy scores, start units (array rows) and lengths.

        The math is :func:`slice_st.spans.top_spans_flat` over the (memory-mapped) arrays, seen as
        tensors without a copy; the block shrinks with the number of queries so that its score
        buffer stays ~8 MB. ``floor`` ``(Q,)``: spans scoring at or below it may be left out.
        """
        widths = max_span - min_span + 1
        block = int(min(SEARCH_BLOCK_UNITS, max(256, SEARCH_SCORE_BUFFER // (widths * len(queries)))))
        with _search_threads():
            found = top_spans_flat(
                queries, _as_tensor(self._arrays["unit_vectors"]), _as_tensor(self._arrays["span_norms"]), top_k,
                min_span, max_span, norm_min_span=self.span_config.min_span, block=block,
                floor=None if floor is None else torch.from_numpy(np.asarray(floor, dtype=np.float64)),
            )
        return found.scores.numpy(), found.starts.numpy(), found.lengths.numpy()

    def _matches(self, query_index: int, scores, units, lengths, threshold: float | None) -> list[IndexMatch]:
        arrays = self._arrays
        matches = []
        for score, unit, length in zip(scores, units, lengths):
            if not np.isfinite(score) or (threshold is not None and score < threshold):
                continue
            segment = int(np.searchsorted(arrays["segment_units"], unit, side="right")) - 1
            doc = int(arrays["segment_docs"][segment])
            start = int(arrays["unit_chars"][unit, 0])
            end = int(arrays["unit_chars"][unit + length - 1, 1])
            unit_start = int(arrays["segment_first_unit"][segment] + unit - arrays["segment_units"][segment])
            calibrated = None if self.calibration is None else round(self.calibration.degree(float(score)), 4)
            matches.append(IndexMatch(
                query_index, self.doc_ids[doc], doc, start, end, self.texts[doc][start:end], float(score),
                unit_start, unit_start + int(length), calibrated,
            ))
        return matches

    # ------------------------------------------------------------------ persistence
    def info(self) -> dict[str, Any]:
        """What the index holds and what it costs in memory."""
        arrays = self._arrays
        nbytes = sum(np.asarray(arrays[name]).nbytes for name in arrays)
        dim = arrays["unit_vectors"].shape[1]
        # what materialising every span vector (float32) would cost: one d-vector per existing span
        norms = arrays["span_norms"]
        spans = sum(int(np.isfinite(norms[i : i + SEARCH_BLOCK_UNITS]).sum()) for i in range(0, len(norms), SEARCH_BLOCK_UNITS))
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
            "calibration": None if self.calibration is None else {
                "pair_score": self.calibration.pair_score, "source": self.calibration.source,
                "pairs": self.calibration.pairs, "spearman": self.calibration.spearman,
            },
            "candidates": None if self._candidates is None else self._candidates.info(),
        }

    def save(self, path: str | os.PathLike) -> str:
        """Write the index to a directory, atomically (the previous version stays until the new one is complete).

        Saves to one directory are serialised by a lock file (``.lock``, ``flock``): a second process
        saving there at the same time gets a ``SpanInputError`` instead of racing the first.
        """
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        with _save_lock(path):
            return self._save_locked(path)

    def _save_locked(self, path: str) -> str:
        data_dir = tempfile.mkdtemp(prefix=f"data-{int(time.time() * 1000)}-", dir=path)
        try:
            for name, values in self._arrays.items():
                _save_array(os.path.join(data_dir, f"{name}.npy"), np.asarray(values))
            encoded = [text.encode("utf-8") for text in self.texts]
            offsets = np.concatenate([[0], np.cumsum([len(b) for b in encoded])]).astype(np.int64)
            _save_array(os.path.join(data_dir, "text_offsets.npy"), offsets)
            _write_bytes(os.path.join(data_dir, "texts.bin"), b"".join(encoded))
            _write_bytes(os.path.join(data_dir, "doc_ids.json"), json.dumps(self.doc_ids, ensure_ascii=False).encode())
            if self.calibration is not None:
                _write_bytes(os.path.join(data_dir, CALIBRATION_FILE), json.dumps(self.calibration.to_dict(), indent=1).encode())
            if self._candidates is not None:
                self._candidates.save(data_dir)
            manifest = self.info() | {"data": os.path.basename(data_dir), "span_config": self.span_config.to_dict()}
            manifest_tmp = os.path.join(path, f".{MANIFEST}.tmp")
            _write_bytes(manifest_tmp, json.dumps(manifest, indent=2).encode())
            os.replace(manifest_tmp, os.path.join(path, MANIFEST))  # the commit point
        except BaseException:
            shutil.rmtree(data_dir, ignore_errors=True)
            raise
        for entry in os.listdir(path):  # earlier versions and leftovers of crashed saves
            if entry.startswith("data-") and entry != manifest["data"]:
                shutil.rmtree(os.path.join(path, entry), ignore_errors=True)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, model: SentenceTransformer | None = None, mmap: bool = True) -> SpanIndex:
        """Open a saved index (arrays memory-mapped). ``model`` must be the one it was built with.

        With no model, the index's recorded model name is loaded (the embedded default if none).
        """
        from slice_st.config import load_model

        path = os.fspath(path)
        manifest = _read_manifest(path, must_exist=True)
        if manifest.get("format_version") != INDEX_FORMAT_VERSION:
            raise SpanInputError(f"{path}: index format {manifest.get('format_version')} is not supported (expected {INDEX_FORMAT_VERSION}).")
        if model is None:
            model = load_model(_model_source(path, manifest))
        fingerprint = model_fingerprint(model)
        if fingerprint != manifest["model_fingerprint"]:
            raise SpanInputError(
                f"{path} was built with another model (fingerprint {manifest['model_fingerprint']}, "
                f"name {manifest.get('model_name') or 'unknown'!r}); this model's fingerprint is {fingerprint}. "
                "Load it with the model it was built with, or rebuild the index."
            )
        index = cls(model, SpanConfig(**manifest["span_config"]), manifest["dtype"])
        data_dir = os.path.join(path, manifest["data"])
        try:
            arrays = {name: np.load(os.path.join(data_dir, f"{name}.npy"), mmap_mode="r" if mmap else None) for name in _ARRAYS}
            blob = open(os.path.join(data_dir, "texts.bin"), "rb").read()
            doc_ids = json.loads(open(os.path.join(data_dir, "doc_ids.json"), encoding="utf-8").read())
        except (OSError, ValueError) as error:
            raise SpanInputError(f"{path}: the index data is missing or corrupt ({error}).") from None
        offsets = arrays.pop("text_offsets")
        if (
            len(offsets) != len(doc_ids) + 1 or offsets[-1] != len(blob) or len(arrays["unit_vectors"]) != manifest["units"]
            or len(doc_ids) != manifest["documents"] or len(arrays["span_norms"]) != manifest["units"]
            or len(arrays["segment_units"]) != len(arrays["segment_docs"]) + 1 or arrays["segment_units"][-1] != manifest["units"]
        ):
            raise SpanInputError(f"{path}: the index data does not match its manifest (corrupt or half-written).")
        index._arrays = arrays
        index.doc_ids = doc_ids
        index.model_name = manifest.get("model_name") or index.model_name
        index.model_path = manifest.get("model_path", index.model_path)
        index.texts = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(doc_ids))]
        try:
            if manifest.get("calibration"):
                index.calibration = Calibration.load(os.path.join(data_dir, CALIBRATION_FILE))
            if manifest.get("candidates"):
                index._candidates = _CandidateStage.load(data_dir, manifest["candidates"])
        except (OSError, ValueError) as error:
            raise SpanInputError(f"{path}: the index data is missing or corrupt ({error}).") from None
        return index


class ShardedSpanIndex:
    """Several indexes (shards, e.g. built in parallel) searched together without merging them in memory.

    Each shard keeps its own (memory-mapped) arrays and is scanned on its own; the per-shard top-k
    lists are merged, so results are those of :meth:`SpanIndex.merge` of the shards: same spans,
    same scores, ``doc_index`` numbered across the shards in order. All shards must share the model
    (fingerprint) and span settings; document ids must be unique across them.

    >>> from slice_st import ShardedSpanIndex
    >>> shards = ShardedSpanIndex.load(["runs/shard-0", "runs/shard-1"])        # doctest: +SKIP
    >>> shards.search("my bag was lost", top_k=5)[0]                             # doctest: +SKIP
    """

    def __init__(self, shards: Sequence[SpanIndex]) -> None:
        shards = list(shards)
        if not shards:
            raise SpanInputError("ShardedSpanIndex needs at least one shard.")
        first = shards[0]
        for position, shard in enumerate(shards):
            if not isinstance(shard, SpanIndex):
                raise SpanInputError(f"Shard {position} is a {type(shard).__name__}, not a SpanIndex.")
            if shard.fingerprint != first.fingerprint:
                raise SpanInputError(
                    f"Shard {position} was built with another model (fingerprint {shard.fingerprint} != {first.fingerprint})."
                )
            if shard.span_config != first.span_config:
                raise SpanInputError(f"Shard {position} has other span settings ({shard.span_config}) than shard 0 ({first.span_config}).")
        seen: set[str] = set()
        for position, shard in enumerate(shards):
            for doc_id in shard.doc_ids:
                if doc_id in seen:
                    raise SpanInputError(f"Document id {doc_id!r} is in more than one shard (shard {position} and an earlier one).")
                seen.add(doc_id)
        self.shards = shards
        self.model = first.model
        self.span_config = first.span_config
        self.calibration = next((shard.calibration for shard in shards if shard.calibration is not None), None)
        self._unit_bases = np.cumsum([0] + [shard.num_units for shard in shards])
        self._doc_bases = np.cumsum([0] + [len(shard) for shard in shards])

    @classmethod
    def load(cls, paths: str | os.PathLike | Sequence[str | os.PathLike], model: SentenceTransformer | None = None,
             mmap: bool = True) -> ShardedSpanIndex:
        """Open shards by path; a directory without ``manifest.json`` stands for the index directories inside it."""
        directories = shard_directories(paths)
        first = SpanIndex.load(directories[0], model, mmap=mmap)
        return cls([first] + [SpanIndex.load(path, first.model, mmap=mmap) for path in directories[1:]])

    def __len__(self) -> int:
        return int(self._doc_bases[-1])

    @property
    def num_units(self) -> int:
        return int(self._unit_bases[-1])

    @property
    def doc_ids(self) -> list[str]:
        return [doc_id for shard in self.shards for doc_id in shard.doc_ids]

    @property
    def texts(self) -> list[str]:
        return [text for shard in self.shards for text in shard.texts]

    def embed_queries(self, queries: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        return self.shards[0].embed_queries(queries, batch_size=batch_size)

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
    ) -> list[list[IndexMatch]]:
        """:meth:`SpanIndex.search` over all shards (same options); queries are embedded once."""
        wanted = _check_search(self.span_config, top_k, per_document, min_span, max_span, candidates)
        if approximate:
            missing = [position for position, shard in enumerate(self.shards) if shard._candidates is None]
            if missing:
                raise SpanInputError(f"approximate search needs a candidate stage in every shard; shards {missing} have none.")
        scanners = [shard._scanner(wanted, approximate, candidates, nprobe) for shard in self.shards]
        vectors = self.embed_queries(_query_list(queries), batch_size=batch_size)

        def scan(query_vectors: torch.Tensor, k: int):
            """Shard by shard, merging into a running top-k; its k-th score lets later exact scans skip what cannot enter."""
            scores = np.full((len(query_vectors), k), -np.inf)
            units = np.full((len(query_vectors), k), -1, dtype=np.int64)
            lengths = np.zeros((len(query_vectors), k), dtype=np.int64)
            for shard, scanner, base in zip(self.shards, scanners, self._unit_bases):
                if approximate:
                    found = scanner(query_vectors, k)
                else:
                    floor = scores[:, -1].copy()
                    found = shard._top_spans(query_vectors, k, wanted.min_span, wanted.max_span, floor if np.isfinite(floor).all() else None)
                merged_scores = np.concatenate([scores, found[0]], axis=1)
                merged_units = np.concatenate([units, np.where(found[1] >= 0, found[1] + base, -1)], axis=1)
                merged_lengths = np.concatenate([lengths, found[2]], axis=1)
                order = np.argsort(-merged_scores, axis=1, kind="stable")[:, :k]  # ties: the earlier shard first
                take = lambda values: np.take_along_axis(values, order, axis=1)  # noqa: E731
                scores, units, lengths = take(merged_scores), take(merged_units), take(merged_lengths)
            return scores, units, lengths

        return _ranked(scan, self._matches, vectors, top_k, threshold, per_document)

    def _matches(self, query_index: int, scores, units, lengths, threshold: float | None) -> list[IndexMatch]:
        matches = []
        for score, unit, length in zip(scores, units, lengths):
            if not np.isfinite(score) or unit < 0:
                continue
            position = int(np.searchsorted(self._unit_bases, unit, side="right")) - 1
            shard = self.shards[position]
            for match in shard._matches(query_index, [score], [int(unit - self._unit_bases[position])], [length], threshold):
                calibrated = None if self.calibration is None else round(self.calibration.degree(float(score)), 4)
                matches.append(dataclasses.replace(match, doc_index=int(match.doc_index + self._doc_bases[position]), calibrated=calibrated))
        return matches

    def info(self) -> dict[str, Any]:
        """Totals over the shards, and each shard's :meth:`SpanIndex.info`."""
        infos = [shard.info() for shard in self.shards]
        return {
            "shards": len(self.shards), "documents": len(self), "units": self.num_units,
            "array_bytes": sum(i["array_bytes"] for i in infos), "model_name": infos[0]["model_name"],
            "model_fingerprint": infos[0]["model_fingerprint"], "per_shard": infos,
        }


def shard_directories(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Index directories named by ``paths``: each path is an index, or a directory of indexes (its sub-directories).

    >>> shard_directories([])
    Traceback (most recent call last):
    ...
    slice_st.encode.SpanInputError: No index directories given.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    directories: list[str] = []
    for path in map(os.fspath, paths):
        if os.path.exists(os.path.join(path, MANIFEST)):
            directories.append(path)
        elif os.path.isdir(path):
            inside = sorted(e.path for e in os.scandir(path) if e.is_dir() and os.path.exists(os.path.join(e.path, MANIFEST)))
            if not inside:
                raise SpanInputError(f"{path} is neither an index (no {MANIFEST}) nor a directory of indexes.")
            directories.extend(inside)
        else:
            raise FileNotFoundError(f"No index at {path!r}.")
    if not directories:
        raise SpanInputError("No index directories given.")
    return directories


#: Torch intra-op threads of the exact scan (``None``: torch's own setting). The scan is memory-bound;
#: on a shared 2-core machine a second thread waiting for a busy core made a 32-query batch 4x slower.
SEARCH_THREADS: int | None = 1


@contextmanager
def _search_threads():
    """Run the scan with ``SEARCH_THREADS`` torch threads (restored afterwards); no-op when ``None``."""
    if SEARCH_THREADS is None or SEARCH_THREADS == torch.get_num_threads():
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(SEARCH_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _as_tensor(values: np.ndarray) -> torch.Tensor:
    """A tensor view of a (possibly read-only, memory-mapped) array: no copy; the scan never writes to it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        return torch.from_numpy(np.asarray(values))


@contextmanager
def _blas_threads(count: int):
    """Limit BLAS threads inside the block (threadpoolctl, a scikit-learn dependency); no-op without it."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(limits=count, user_api="blas"):
        yield


def _check_search(built: SpanConfig, top_k: int, per_document: int | None, min_span: int | None, max_span: int | None,
                  candidates: int | None) -> SpanConfig:
    """Validate search options against the span range an index was built with; returns the range searched."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise SpanInputError(f"top_k must be a positive integer, got {top_k!r}.")
    if per_document is not None and (isinstance(per_document, bool) or not isinstance(per_document, int) or per_document < 1):
        raise SpanInputError(f"per_document must be a positive integer, got {per_document!r}.")
    if candidates is not None and (isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1):
        raise SpanInputError(f"candidates must be a positive integer, got {candidates!r}.")
    try:
        wanted = built.replace(min_span=min_span, max_span=max_span)
    except ValueError as error:
        raise SpanInputError(str(error)) from None
    if wanted.min_span < built.min_span or wanted.max_span > built.max_span:
        raise SpanInputError(
            f"This index holds spans of {built.min_span}..{built.max_span} {built.unit}s; "
            f"cannot search {wanted.min_span}..{wanted.max_span}."
        )
    return wanted


def _query_list(queries: str | Sequence[str]) -> list[str]:
    query_list, _ = _as_text_list(queries, "queries")
    if not query_list:
        raise SpanInputError("queries is empty: give at least one query.")
    return query_list


def _ranked(scan, to_matches, vectors: torch.Tensor, top_k: int, threshold: float | None, per_document: int | None) -> list[list[IndexMatch]]:
    """Matches per query from ``scan(vectors, k)``; with ``per_document``, asks for more spans until ``top_k`` survive the cut."""
    if per_document is None:
        scores, units, lengths = scan(vectors, top_k)
        return [to_matches(q, scores[q], units[q], lengths[q], threshold) for q in range(len(vectors))]
    results = []
    for q in range(len(vectors)):
        asked = 16 * top_k * per_document  # overlapping spans of one document crowd the top
        while True:
            scores, units, lengths = (values[0] for values in scan(vectors[q : q + 1], asked))
            matches = to_matches(q, scores, units, lengths, threshold)
            kept, per_doc = [], {}
            for match in matches:
                if per_doc.get(match.doc_index, 0) < per_document:
                    per_doc[match.doc_index] = per_doc.get(match.doc_index, 0) + 1
                    kept.append(match)
            exhausted = len(matches) < asked  # every span (above the threshold) was ranked
            if len(kept) >= top_k or exhausted:
                break
            asked *= 4
        results.append(kept[:top_k])
    return results


LOCK_FILE = ".lock"


@contextmanager
def _save_lock(path: str):
    """Hold ``path/.lock`` for a save (``fcntl.flock``, released if the process dies; ``O_EXCL`` where there is no fcntl)."""
    lock_path = os.path.join(path, LOCK_FILE)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        try:
            handle = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            raise SpanInputError(
                f"{path} is being saved by another process (lock file {lock_path}; delete it if no save is running)."
            ) from None
        try:
            os.write(handle, f"pid {os.getpid()}".encode())
            yield
        finally:
            os.close(handle)
            os.remove(lock_path)
        return
    with open(lock_path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise SpanInputError(f"{path} is being saved by another process ({holder}); try again when that save has finished.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield  # closing the file releases the lock


def model_identity(model: SentenceTransformer) -> tuple[str, str]:
    """``(name, path)`` of a model: a readable name, and the local directory it was loaded from (``""`` if none).

    A Hub model is named by its id; a local one by its directory's name (with the parent's for
    generic names such as ``final`` or ``checkpoint-500``); the embedded default by its Hub id.

    >>> from slice_st import load_model
    >>> model_identity(load_model())
    ('sentence-transformers/all-MiniLM-L6-v2', '')
    """
    import re

    from slice_st.config import DEFAULT_MODEL_NAME, default_model_path

    card = getattr(model, "model_card_data", None)
    hub_id = getattr(card, "model_id", None) or getattr(card, "base_model", None) or ""
    source = ""
    try:
        for module in model:
            config = getattr(getattr(module, "auto_model", None), "config", None)
            if config is not None:
                source = str(getattr(config, "name_or_path", "") or "")
                break
    except TypeError:  # not a module list
        pass
    if not source or not os.path.isdir(source):
        return (hub_id or source), ""
    path = os.path.abspath(source)
    if re.fullmatch(r"\d+_\w+", os.path.basename(path)):  # the transformer inside an ST folder (0_Transformer)
        path = os.path.dirname(path)
    try:
        if os.path.samefile(path, default_model_path()):
            return DEFAULT_MODEL_NAME, ""
    except OSError:
        pass
    name = os.path.basename(path)
    if re.fullmatch(r"(model|final|best|last|output|checkpoint(-\d+)?)", name, flags=re.IGNORECASE):
        name = f"{os.path.basename(os.path.dirname(path))}/{name}"
    return hub_id or name, path


def _model_source(index_path: str, manifest: dict[str, Any]) -> str | None:
    """What to load when an index is opened without a model: its recorded local path, else its name (None: the default)."""
    model_path = manifest.get("model_path") or ""
    if model_path:
        if os.path.isdir(model_path):
            return model_path
        raise SpanInputError(
            f"{index_path} was built with the model at {model_path!r} ({manifest.get('model_name') or 'unnamed'}), "
            "which is not there any more: pass the model (model=..., --model)."
        )
    return manifest.get("model_name") or None


def _pool_devices(devices: Sequence[str] | None, processes: int | None, pool: dict[str, Any] | None) -> list[str] | None:
    """Validate the multi-process options: the devices of a pool to start (``None``: no pool to start)."""
    if pool is not None:
        if devices is not None or processes is not None:
            raise SpanInputError("Give either pool or devices/processes, not both.")
        if not isinstance(pool, dict) or not pool.get("processes"):
            raise SpanInputError("pool must be a pool from model.start_multi_process_pool(...).")
        return None
    if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int) or processes < 1):
        raise SpanInputError(f"processes must be a positive integer, got {processes!r}.")
    if devices is None:
        return None if processes in (None, 1) else ["cpu"] * processes
    if isinstance(devices, str) or not all(isinstance(d, str) and d for d in devices) or not len(devices):
        raise SpanInputError(f"devices must be a non-empty list of device names such as ['cuda:0', 'cuda:1'], got {devices!r}.")
    if processes is not None and processes != len(devices):
        raise SpanInputError(f"processes ({processes}) does not match the {len(devices)} devices given; give one or the other.")
    for name in devices:
        try:
            device = torch.device(name)
        except RuntimeError:
            raise SpanInputError(f"Unknown device {name!r} (expected e.g. 'cpu', 'cuda:0').") from None
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise SpanInputError(f"Device {name!r} was asked for, but CUDA is not available here.")
            if (device.index or 0) >= torch.cuda.device_count():
                raise SpanInputError(f"Device {name!r} does not exist: {torch.cuda.device_count()} CUDA device(s) here.")
        elif device.type != "cpu" and not hasattr(torch, device.type):
            raise SpanInputError(f"Unsupported device {name!r}.")
    return list(devices)


class _PooledEncoder:
    """The model as ``_encode_windows`` sees it, with ``encode`` running in a sentence-transformers pool.

    Only public API: ``model.encode(..., pool=pool)`` passes ``output_value=None`` and
    ``processing_kwargs`` on to the workers, which return the same per-window outputs.
    """

    def __init__(self, model: SentenceTransformer, pool: dict[str, Any]) -> None:
        self._model, self._pool = model, pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __getitem__(self, item):
        return self._model[item]

    def encode(self, inputs, **kwargs):
        return self._model.encode(inputs, pool=self._pool, **kwargs)


@contextmanager
def _encoder(model: SentenceTransformer, targets: list[str] | None, pool: dict[str, Any] | None):
    """Yield what encodes the windows: the model itself, or the model through a (started or given) pool.

    A pool started here is stopped on exit and the model moved back to its device
    (``start_multi_process_pool`` moves it to the CPU). CPU workers get ``cores / workers`` threads each.
    """
    if pool is not None:
        yield _PooledEncoder(model, pool)
        return
    if targets is None:
        yield model
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
        yield _PooledEncoder(model, started)
    finally:
        model.stop_multi_process_pool(started)
        model.to(device)


def _concat_parts(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate encoded pieces (document numbers already global), shifting their segment unit offsets."""
    if len(parts) == 1:
        return parts[0]
    bases = np.cumsum([0] + [len(p["unit_vectors"]) for p in parts])[:-1]
    out = {name: np.concatenate([p[name] for p in parts]) for name in ("unit_vectors", "unit_chars", "span_norms", "segment_docs", "segment_first_unit")}
    out["segment_units"] = np.concatenate([[0]] + [p["segment_units"][1:] + base for p, base in zip(parts, bases)]).astype(np.int64)
    return out


def _texts_and_ids(texts: Any, text_field: str, id_field: str | None) -> tuple[list[str], list[str] | None]:
    """Texts and their ids (``None``: to be numbered) from strings, :class:`Document` s or a ``datasets.Dataset``."""
    from slice_st.corpus import Document, documents_from_dataset

    if hasattr(texts, "column_names") and hasattr(texts, "features"):  # a datasets.Dataset
        documents = documents_from_dataset(texts, text_field, id_field)
        return [d.text for d in documents], ([d.id for d in documents] if id_field is not None else None)
    if not isinstance(texts, str) and isinstance(texts, Iterable) and not isinstance(texts, (bytes, dict)):
        texts = list(texts)
        if texts and all(isinstance(item, Document) for item in texts):
            return [d.text for d in texts], [d.id for d in texts]
    return _as_text_list(texts)[0], None


class _CandidateStage:
    """FAISS over normalised chunk vectors (chunks of units inside segments) → candidate span starts."""

    FILE, CHUNKS = "candidates.faiss", "candidate_chunks.npy"

    def __init__(self, faiss_index, chunks: np.ndarray, settings: dict[str, Any]) -> None:
        self.faiss_index = faiss_index
        self.chunks = chunks  # (M, 2) [start, end) unit rows of each chunk
        self.settings = settings

    # -------------------------------------------------------------- building
    @staticmethod
    def chunk_ranges(segment_units: np.ndarray, chunk: int, stride: int) -> np.ndarray:
        """``(M, 2)`` unit ranges: in each segment, chunks of ``chunk`` units every ``stride`` units."""
        ranges = []
        bounds = np.asarray(segment_units)
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if hi <= lo:
                continue
            starts = np.arange(lo, max(hi - chunk, lo) + 1, stride)
            if starts[-1] + chunk < hi:  # the tail
                starts = np.append(starts, hi - chunk)
            ranges.append(np.stack([starts, np.minimum(starts + chunk, hi)], axis=1))
        return np.concatenate(ranges).astype(np.int64) if ranges else np.zeros((0, 2), np.int64)

    @staticmethod
    def chunk_vectors(unit_vectors, chunks: np.ndarray, block: int = 8192) -> np.ndarray:
        """Normalised sums of the unit vectors of each chunk (float32), computed block by block."""
        out = np.zeros((len(chunks), unit_vectors.shape[1]), dtype=np.float32)
        position = 0
        while position < len(chunks):
            lo = int(chunks[position, 0])
            stop = int(np.searchsorted(chunks[:, 0], lo + block, side="left"))
            stop = max(stop, position + 1)
            hi = int(chunks[position:stop, 1].max())
            values = np.asarray(unit_vectors[lo:hi], dtype=np.float64)
            prefix = np.concatenate([np.zeros((1, values.shape[1])), np.cumsum(values, axis=0)])
            part = chunks[position:stop] - lo
            out[position:stop] = prefix[part[:, 1]] - prefix[part[:, 0]]
            position = stop
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    @classmethod
    def create(cls, arrays, kind: str, chunk: int, stride: int, nlist: int | None, nprobe: int, candidates: int) -> _CandidateStage:
        import faiss

        chunks = cls.chunk_ranges(arrays["segment_units"], chunk, stride)
        vectors = cls.chunk_vectors(arrays["unit_vectors"], chunks)
        dim = vectors.shape[1]
        if kind == "flat":
            faiss_index, nlist = faiss.IndexFlatIP(dim), 0
        else:
            if nlist is None:
                nlist = int(max(1, min(np.sqrt(len(vectors)), len(vectors) // 39)))
            quantizer = faiss.IndexFlatIP(dim)
            faiss_index = faiss.IndexIVFScalarQuantizer(quantizer, dim, int(nlist), faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            sample = vectors
            if len(vectors) > 64 * nlist:  # k-means needs no more than ~64 points per list here
                sample = vectors[np.random.default_rng(0).choice(len(vectors), 64 * nlist, replace=False)]
            faiss_index.train(sample)
        faiss_index.add(vectors)
        settings = {"kind": kind, "chunk": chunk, "stride": stride, "nlist": int(nlist), "nprobe": nprobe, "candidates": candidates}
        return cls(faiss_index, chunks, settings)

    def extended(self, arrays, unit_base: int) -> _CandidateStage:
        """A copy with the chunks of units from ``unit_base`` on (appended documents) added."""
        import faiss

        bounds = np.asarray(arrays["segment_units"])
        first_segment = int(np.searchsorted(bounds, unit_base, side="left"))
        new = self.chunk_ranges(bounds[first_segment:], self.settings["chunk"], self.settings["stride"])
        copy = faiss.clone_index(self.faiss_index)
        if len(new):
            copy.add(self.chunk_vectors(arrays["unit_vectors"], new))
        return _CandidateStage(copy, np.concatenate([self.chunks, new]), dict(self.settings))

    def info(self) -> dict[str, Any]:
        return self.settings | {"chunks": int(len(self.chunks)), "faiss_type": type(self.faiss_index).__name__}

    # -------------------------------------------------------------- persistence
    def save(self, data_dir: str) -> None:
        import faiss

        path = os.path.join(data_dir, self.FILE)
        faiss.write_index(self.faiss_index, path)
        with open(path, "rb+") as handle:
            os.fsync(handle.fileno())
        _save_array(os.path.join(data_dir, self.CHUNKS), self.chunks)

    @classmethod
    def load(cls, data_dir: str, info: dict[str, Any]) -> _CandidateStage:
        import faiss

        path = os.path.join(data_dir, cls.FILE)
        if not os.path.exists(path):
            raise OSError(f"missing {cls.FILE}")
        faiss_index = faiss.read_index(path)
        chunks = np.load(os.path.join(data_dir, cls.CHUNKS))
        if faiss_index.ntotal != len(chunks):
            raise ValueError(f"{cls.FILE} holds {faiss_index.ntotal} vectors for {len(chunks)} chunks")
        settings = {key: info[key] for key in ("kind", "chunk", "stride", "nlist", "nprobe", "candidates")}
        return cls(faiss_index, chunks, settings)

    # -------------------------------------------------------------- searching
    def top_spans(self, index: SpanIndex, queries: torch.Tensor, top_k: int, min_span: int, max_span: int,
                  candidates: int | None, nprobe: int | None):
        """Candidate chunks from FAISS, then exact scores of every span overlapping them: ``(Q, k)`` arrays."""
        candidates = candidates or self.settings["candidates"]
        if hasattr(self.faiss_index, "nprobe"):
            self.faiss_index.nprobe = int(min(nprobe or self.settings["nprobe"], self.settings["nlist"] or 1))
        query_array = np.ascontiguousarray(queries.numpy(), dtype=np.float32)
        _, found = self.faiss_index.search(query_array, int(min(candidates, len(self.chunks))))
        arrays = index._arrays
        total = index.num_units
        built_min = index.span_config.min_span
        num_queries = len(query_array)
        best_scores = np.full((num_queries, top_k), -np.inf)
        best_units = np.full((num_queries, top_k), -1, dtype=np.int64)
        best_lengths = np.zeros((num_queries, top_k), dtype=np.int64)
        lengths = np.arange(min_span, max_span + 1)
        unit_vectors = np.asarray(arrays["unit_vectors"])  # a plain view: no memmap overhead per slice
        span_norms = np.asarray(arrays["span_norms"])
        with _blas_threads(1), _search_threads():
            for q in range(num_queries):
                chosen = self.chunks[found[q][found[q] >= 0]]
                if not len(chosen):
                    continue
                # every span overlapping a chosen chunk starts in [chunk_start - max_span + 1, chunk_end)
                lo = np.maximum(chosen[:, 0] - max_span + 1, 0)
                run_lo, run_hi = _merged_runs(lo, np.minimum(chosen[:, 1] + max_span - 1, total))
                # dot products over each contiguous run of needed units (views of the array, no gather)
                dots = np.concatenate([np.asarray(unit_vectors[a:b], dtype=np.float32) @ query_array[q]
                                       for a, b in zip(run_lo.tolist(), run_hi.tolist())])
                needed = _ranges_to_indices(run_lo, run_hi)
                # the runs laid end to end are a flat corpus whose spans are those of the candidate starts
                # that stay inside one run: every other span gets a NaN norm (it does not exist here)
                norms = span_norms[needed, min_span - built_min : max_span - built_min + 1].astype(np.float32)
                starts = _union_of_ranges(lo, chosen[:, 1])
                norms[~np.isin(needed, starts, assume_unique=True)] = np.nan
                run_end = np.repeat(np.cumsum(run_hi - run_lo), run_hi - run_lo)  # end of each position's run
                norms[np.arange(len(needed))[:, None] + lengths[None, :] > run_end[:, None]] = np.nan
                top = top_spans_from_dots(torch.from_numpy(dots)[None], torch.from_numpy(norms), top_k, min_span, max_span,
                                          norm_min_span=min_span)
                keep = int((top.starts[0] >= 0).sum())
                best_scores[q, :keep] = top.scores[0, :keep].numpy()
                best_units[q, :keep] = needed[top.starts[0, :keep].numpy()]
                best_lengths[q, :keep] = top.lengths[0, :keep].numpy()
        return best_scores, best_units, best_lengths


def _merged_runs(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``[lo_i, hi_i)`` as sorted disjoint runs ``(run_lo, run_hi)`` (intervals merged, no hashing)."""
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if not len(lo):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)
    first = np.ones(len(lo), dtype=bool)
    first[1:] = lo[1:] > reach[:-1]
    group_starts = np.flatnonzero(first)
    return lo[group_starts].astype(np.int64), reach[np.append(group_starts[1:], len(lo)) - 1].astype(np.int64)


def _ranges_to_indices(run_lo: np.ndarray, run_hi: np.ndarray) -> np.ndarray:
    """All integers of sorted disjoint runs, ascending."""
    sizes = run_hi - run_lo
    if not len(sizes):
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(run_lo - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    return np.arange(int(sizes.sum()), dtype=np.int64) + offsets


def _union_of_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sorted unique integers of the union of ``[lo_i, hi_i)``.

    >>> _union_of_ranges(np.array([5, 0, 2]), np.array([7, 3, 4])).tolist()
    [0, 1, 2, 3, 5, 6]
    """
    return _ranges_to_indices(*_merged_runs(lo, hi))


def _char_offsets(offsets: np.ndarray) -> np.ndarray:
    if offsets.size and offsets.max() >= np.iinfo(np.int32).max:
        raise SpanInputError("A document longer than 2^31 characters cannot be indexed; split it.")
    return offsets.astype(np.int32)


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _save_array(path: str, values: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.save(handle, values)
        handle.flush()
        os.fsync(handle.fileno())


def _read_manifest(path: str, must_exist: bool) -> dict[str, Any] | None:
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.exists(manifest_path):
        if must_exist:
            if not os.path.isdir(path):
                raise FileNotFoundError(f"No index at {path!r}.")
            raise SpanInputError(f"{path} is not a SpanIndex (no {MANIFEST}; a save may have been interrupted).")
        return None
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise SpanInputError(f"{path}: unreadable index manifest ({error}).") from None
