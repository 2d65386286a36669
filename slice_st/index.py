"""``SpanIndex``: exact span search over a corpus without storing a vector per span.

A SLICE span vector is the mean of its token vectors, so its cosine to a query ``q`` is
``q · S / ‖S‖`` with ``S`` the sum of the span's unit sums. The index stores, per unit (word or
token), the **sum of its token vectors** (``d`` numbers) and, per span starting at that unit, the
**norm of the span's sum** (``K`` scalars). A search is one matmul ``units @ q`` (N dot products per
query), a float64 prefix sum of those scalars, and one subtraction and division per span: exact,
with ``d + K`` numbers per unit instead of the ``K · d`` of materialised span vectors.

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
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slice_st.config import SpanConfig, get_span_config
from slice_st.encode import SpanInputError, _as_text_list, _encode_windows, _span_config, _token_dimension, embed_texts
from slice_st.spans import span_sum_norms, unit_sums

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["SpanIndex", "IndexMatch", "model_fingerprint", "INDEX_FORMAT_VERSION"]

INDEX_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
_ARRAYS = ("unit_vectors", "unit_chars", "span_norms", "segment_units", "segment_docs", "segment_first_unit", "text_offsets")
#: Units scored per block: bounds the (block, Q) float64 buffers and resets the prefix sums.
SEARCH_BLOCK_UNITS = 1 << 16


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
        self.model_name = getattr(model.model_card_data, "base_model", None) or ""
        self.doc_ids: list[str] = []
        self.texts: list[str] = []
        self._arrays = _empty_arrays(_token_dimension(model), span_config.max_span - span_config.min_span + 1, np.dtype(dtype))

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        model: SentenceTransformer | None = None,
        ids: Sequence[str] | None = None,
        *,
        min_span: int | None = None,
        max_span: int | None = None,
        unit: str | None = None,
        dtype: str = "float32",
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
    ) -> SpanIndex:
        """Encode ``texts`` (one forward pass each, long ones windowed) into a new index.

        ``ids`` default to ``"0"``, ``"1"``, …; they must be unique strings. Span settings default to
        the model's (see :func:`slice_st.get_span_config`); searches may use any sub-range of them.
        """
        from slice_st.config import load_model

        model = model if model is not None else load_model()
        index = cls(model, _span_config(model, min_span, max_span, unit), dtype)
        index.add(texts, ids, batch_size=batch_size, show_progress_bar=show_progress_bar)
        return index

    def add(
        self,
        texts: Iterable[str],
        ids: Sequence[str] | None = None,
        *,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
    ) -> list[str]:
        """Append documents; returns their ids. On any error the index is left as it was."""
        text_list, _ = _as_text_list(texts)
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
        new = self._encode(text_list, batch_size, show_progress_bar)
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

    def _encode(self, texts: list[str], batch_size: int, show_progress_bar: bool | None) -> dict[str, np.ndarray]:
        """Segments (windows) of ``texts`` in order: unit sums, unit char offsets, span norms."""
        config = self.span_config
        segments: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] = []
        for batch in _encode_windows(self.model, texts, config, batch_size, show_progress_bar, 16, "Indexing"):
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
        return int(drop.sum())

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
    ) -> list[list[IndexMatch]]:
        """For each query, the ``top_k`` spans of the whole corpus by cosine, best first.

        Exact: the same ranking and scores as materialising every span vector. ``min_span``/
        ``max_span`` may narrow the index's span range. ``threshold`` drops matches below it.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise SpanInputError(f"top_k must be a positive integer, got {top_k!r}.")
        built = self.span_config
        try:
            wanted = built.replace(min_span=min_span, max_span=max_span)
        except ValueError as error:
            raise SpanInputError(str(error)) from None
        if wanted.min_span < built.min_span or wanted.max_span > built.max_span:
            raise SpanInputError(
                f"This index holds spans of {built.min_span}..{built.max_span} {built.unit}s; "
                f"cannot search {wanted.min_span}..{wanted.max_span}."
            )
        query_list, _ = _as_text_list(queries, "queries")
        if not query_list:
            raise SpanInputError("queries is empty: give at least one query.")
        vectors = torch.nn.functional.normalize(embed_texts(self.model, query_list, batch_size=batch_size).float().cpu(), dim=-1)
        scores, units, lengths = self._top_spans(vectors, top_k, wanted.min_span, wanted.max_span)
        return [self._matches(q, scores[q], units[q], lengths[q], threshold) for q in range(len(query_list))]

    def _top_spans(self, queries: torch.Tensor, top_k: int, min_span: int, max_span: int):
        """Blockwise exact scoring: returns ``(Q, k)`` scores, start units (array rows) and lengths."""
        arrays = self._arrays
        total = self.num_units
        num_queries = queries.shape[0]
        best_scores = torch.full((num_queries, top_k), float("-inf"), dtype=torch.float64)
        best_units = torch.full((num_queries, top_k), -1, dtype=torch.long)
        best_lengths = torch.zeros((num_queries, top_k), dtype=torch.long)
        column = lambda length: length - self.span_config.min_span  # noqa: E731
        for block_start in range(0, total, SEARCH_BLOCK_UNITS):
            block_end = min(block_start + SEARCH_BLOCK_UNITS, total)
            stop = min(block_end + max_span, total)  # spans starting in the block may run past it
            vectors = torch.from_numpy(np.array(arrays["unit_vectors"][block_start:stop], dtype=np.float32))
            dots = (vectors @ queries.T).double()  # (n, Q)
            prefix = torch.cat([dots.new_zeros(1, num_queries), dots.cumsum(dim=0)])  # reset per block
            norms = torch.from_numpy(np.array(arrays["span_norms"][block_start:block_end], dtype=np.float64))
            starts = torch.arange(block_start, block_end)
            for length in range(min_span, max_span + 1):
                count = min(block_end, stop - length + 1) - block_start
                if count <= 0:
                    continue
                numerators = prefix[length : length + count] - prefix[:count]  # (count, Q)
                scores = (numerators / norms[:count, column(length), None]).nan_to_num(nan=float("-inf"))
                merged = torch.cat([best_scores, scores.T], dim=1)
                best_scores, order = merged.topk(top_k, dim=1)
                candidates_units = torch.cat([best_units, starts[:count].expand(num_queries, count)], dim=1)
                candidates_lengths = torch.cat([best_lengths, torch.full((num_queries, count), length)], dim=1)
                best_units = candidates_units.gather(1, order)
                best_lengths = candidates_lengths.gather(1, order)
        return best_scores.numpy(), best_units.numpy(), best_lengths.numpy()

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
            matches.append(IndexMatch(
                query_index, self.doc_ids[doc], doc, start, end, self.texts[doc][start:end], float(score),
                unit_start, unit_start + int(length),
            ))
        return matches

    # ------------------------------------------------------------------ persistence
    def info(self) -> dict[str, Any]:
        """What the index holds and what it costs in memory."""
        arrays = self._arrays
        nbytes = sum(np.asarray(arrays[name]).nbytes for name in arrays)
        dim = arrays["unit_vectors"].shape[1]
        width = arrays["span_norms"].shape[1]
        materialised = self.num_units * width * dim * 4
        return {
            "format_version": INDEX_FORMAT_VERSION,
            "documents": len(self.doc_ids),
            "segments": len(arrays["segment_docs"]),
            "units": self.num_units,
            "unit": self.span_config.unit,
            "min_span": self.span_config.min_span,
            "max_span": self.span_config.max_span,
            "dimension": dim,
            "dtype": self.dtype,
            "array_bytes": int(nbytes),
            "materialised_span_bytes": int(materialised),
            "model_name": self.model_name,
            "model_fingerprint": self.fingerprint,
        }

    def save(self, path: str | os.PathLike) -> str:
        """Write the index to a directory, atomically (the previous version stays until the new one is complete)."""
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        data_dir = tempfile.mkdtemp(prefix=f"data-{int(time.time() * 1000)}-", dir=path)
        try:
            for name, values in self._arrays.items():
                _save_array(os.path.join(data_dir, f"{name}.npy"), np.asarray(values))
            encoded = [text.encode("utf-8") for text in self.texts]
            offsets = np.concatenate([[0], np.cumsum([len(b) for b in encoded])]).astype(np.int64)
            _save_array(os.path.join(data_dir, "text_offsets.npy"), offsets)
            _write_bytes(os.path.join(data_dir, "texts.bin"), b"".join(encoded))
            _write_bytes(os.path.join(data_dir, "doc_ids.json"), json.dumps(self.doc_ids, ensure_ascii=False).encode())
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
            model = load_model(manifest.get("model_name") or None)
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
        if len(offsets) != len(doc_ids) + 1 or offsets[-1] != len(blob) or len(arrays["unit_vectors"]) != manifest["units"]:
            raise SpanInputError(f"{path}: the index data does not match its manifest (corrupt or half-written).")
        index._arrays = arrays
        index.doc_ids = doc_ids
        index.texts = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(doc_ids))]
        return index


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
