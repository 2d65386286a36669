"""The optional FAISS candidate stage of a :class:`~slice_st.SpanIndex` (``search(..., approximate=True)``): a query's
best chunks of units (FAISS, inner product of normalised sums) name the spans then scored exactly."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from slice_st._extras import needs_extra
from slice_st.errors import SpanInputError
from slice_st.index.search import blas_threads
from slice_st.index.storage import DataFolder, load_array, read_bytes, save_array, write_bytes
from slice_st.spans import top_spans_from_dots


class CandidateStage:
    """FAISS over normalised chunk vectors (chunks of units inside segments) → candidate span starts."""

    FILE, CHUNKS = "candidates.faiss", "candidate_chunks.npy"

    def __init__(self, faiss_index, chunks: np.ndarray, settings: dict[str, Any]) -> None:
        self.faiss_index = faiss_index
        self.chunks = chunks  # (M, 2) [start, end) unit rows of each chunk
        self.settings = settings

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
            stop = max(int(np.searchsorted(chunks[:, 0], lo + block, side="left")), position + 1)
            hi = int(chunks[position:stop, 1].max())
            values = np.asarray(unit_vectors[lo:hi], dtype=np.float64)
            prefix = np.concatenate([np.zeros((1, values.shape[1])), np.cumsum(values, axis=0)])
            part = chunks[position:stop] - lo
            out[position:stop] = prefix[part[:, 1]] - prefix[part[:, 0]]
            position = stop
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    @classmethod
    def create(
        cls,
        arrays,
        kind: str,
        chunk: int,
        stride: int,
        nlist: int | None,
        nprobe: int,
        candidates: int,
    ) -> CandidateStage:
        with needs_extra("faiss", "the FAISS candidate stage"):
            import faiss
        chunks = cls.chunk_ranges(arrays["segment_units"], chunk, stride)
        vectors = cls.chunk_vectors(arrays["unit_vectors"], chunks)
        dim = vectors.shape[1]
        faiss_index: faiss.Index
        if kind == "flat":
            faiss_index, nlist = faiss.IndexFlatIP(dim), 0
        else:
            if nlist is None:
                nlist = int(max(1, min(np.sqrt(len(vectors)), len(vectors) // 39)))
            elif nlist > len(vectors):
                # k-means cannot make more lists than it has points (a FAISS RuntimeError)
                raise SpanInputError(
                    f"nlist={nlist} is more than the {len(vectors)} chunks of this index: give at most "
                    f"{len(vectors)}, leave it out (the default suits the index), or use kind='flat'."
                )
            faiss_index = faiss.IndexIVFScalarQuantizer(  # keeps its quantizer alive
                faiss.IndexFlatIP(dim),
                dim,
                int(nlist),
                faiss.ScalarQuantizer.QT_8bit,
                faiss.METRIC_INNER_PRODUCT,
            )
            sample = vectors
            if len(vectors) > 64 * nlist:  # k-means needs no more than ~64 points per list here
                rng = np.random.default_rng(0)
                sample = vectors[rng.choice(len(vectors), 64 * nlist, replace=False)]
            faiss_index.train(sample)
        faiss_index.add(vectors)
        settings = dict(
            kind=kind,
            chunk=chunk,
            stride=stride,
            nlist=int(nlist),
            nprobe=nprobe,
            candidates=candidates,
        )
        return cls(faiss_index, chunks, settings)

    def extended(self, arrays, unit_base: int) -> CandidateStage:
        """A copy with the chunks of units from ``unit_base`` on (appended documents) added."""
        with needs_extra("faiss", "the FAISS candidate stage"):
            import faiss
        bounds = np.asarray(arrays["segment_units"])
        first_segment = int(np.searchsorted(bounds, unit_base, side="left"))
        new = self.chunk_ranges(
            bounds[first_segment:], self.settings["chunk"], self.settings["stride"]
        )
        copy = faiss.clone_index(self.faiss_index)
        if len(new):
            copy.add(self.chunk_vectors(arrays["unit_vectors"], new))
        return CandidateStage(copy, np.concatenate([self.chunks, new]), dict(self.settings))

    def info(self) -> dict[str, Any]:
        return self.settings | {
            "chunks": int(len(self.chunks)),
            "faiss_type": type(self.faiss_index).__name__,
        }

    def save(self, data_dir: str) -> None:
        with needs_extra("faiss", "the FAISS candidate stage"):
            import faiss
        blob = faiss.serialize_index(self.faiss_index).tobytes()
        write_bytes(os.path.join(data_dir, self.FILE), blob)
        save_array(os.path.join(data_dir, self.CHUNKS), self.chunks)

    @classmethod
    def load(cls, data: DataFolder, info: dict[str, Any]) -> CandidateStage:
        """The stage saved in an open data folder (its files read from the folder itself, never through a link)."""
        with needs_extra("faiss", "the FAISS candidate stage"):
            import faiss
        blob = read_bytes(data.entry(cls.FILE), folder=data.folder)
        faiss_index = faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))
        chunks = load_array(data.entry(cls.CHUNKS), folder=data.folder)
        if faiss_index.ntotal != len(chunks):
            raise ValueError(
                f"{cls.FILE} holds {faiss_index.ntotal} vectors for {len(chunks)} chunks"
            )
        settings = {
            key: info[key] for key in ("kind", "chunk", "stride", "nlist", "nprobe", "candidates")
        }
        return cls(faiss_index, chunks, settings)

    def top_spans(
        self,
        index,
        queries: torch.Tensor,
        top_k: int,
        min_span: int,
        max_span: int,
        candidates,
        nprobe,
    ):
        """Candidate chunks from FAISS, then exact scores of every span overlapping them: ``(Q, k)`` arrays."""
        if hasattr(self.faiss_index, "nprobe"):
            self.faiss_index.nprobe = int(
                min(nprobe or self.settings["nprobe"], self.settings["nlist"] or 1)
            )
        query_array = np.ascontiguousarray(queries.numpy(), dtype=np.float32)
        wanted = int(min(candidates or self.settings["candidates"], len(self.chunks)))
        found, num_queries = self.faiss_index.search(query_array, wanted)[1], len(query_array)
        best_scores = np.full((num_queries, top_k), -np.inf)
        best_units = np.full((num_queries, top_k), -1, dtype=np.int64)
        best_lengths = np.zeros((num_queries, top_k), dtype=np.int64)
        total, built_min = index.num_units, index.span_config.min_span
        lengths = np.arange(min_span, max_span + 1)
        # plain views: no memmap overhead per slice
        vectors = np.asarray(index.arrays["unit_vectors"])
        span_norms = np.asarray(index.arrays["span_norms"])
        # one small product per query and run: threading costs more than it saves
        with blas_threads(1):
            for q, query in enumerate(query_array):
                chosen = self.chunks[found[q][found[q] >= 0]]
                if not len(chosen):
                    continue
                # every span overlapping a chosen chunk starts in [chunk_start - max_span + 1, chunk_end)
                lo = np.maximum(chosen[:, 0] - max_span + 1, 0)
                run_lo, run_hi = _merged_runs(lo, np.minimum(chosen[:, 1] + max_span - 1, total))
                # dot products over each contiguous run of needed units (views of the array, no gather)
                runs = zip(run_lo.tolist(), run_hi.tolist())
                dots = np.concatenate(
                    [np.asarray(vectors[a:b], dtype=np.float32) @ query for a, b in runs]
                )[None]
                needed = ranges_to_indices(run_lo, run_hi)
                # the runs laid end to end are a flat corpus whose spans are those of the candidate starts
                # that stay inside one run: every other span gets a NaN norm (it does not exist here)
                norms = span_norms[needed, min_span - built_min : max_span - built_min + 1].astype(
                    np.float32
                )
                starts = ranges_to_indices(*_merged_runs(lo, chosen[:, 1]))  # every candidate start
                norms[~np.isin(needed, starts, assume_unique=True)] = np.nan
                # the end of each position's run
                run_end = np.repeat(np.cumsum(run_hi - run_lo), run_hi - run_lo)
                past_run = np.arange(len(needed))[:, None] + lengths[None, :] > run_end[:, None]
                norms[past_run] = np.nan
                top = top_spans_from_dots(
                    torch.from_numpy(dots),
                    torch.from_numpy(norms),
                    top_k,
                    min_span,
                    max_span,
                    norm_min_span=min_span,
                )
                keep = int((top.starts[0] >= 0).sum())
                best_scores[q, :keep] = top.scores[0, :keep].numpy()
                best_units[q, :keep] = needed[top.starts[0, :keep].numpy()]
                best_lengths[q, :keep] = top.lengths[0, :keep].numpy()
        return best_scores, best_units, best_lengths


def _merged_runs(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of non-empty ``[lo_i, hi_i)`` (at least one) as sorted disjoint runs ``(run_lo, run_hi)``."""
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)
    first = np.ones(len(lo), dtype=bool)
    first[1:] = lo[1:] > reach[:-1]
    group_starts = np.flatnonzero(first)
    group_ends = np.append(group_starts[1:], len(lo)) - 1
    return lo[group_starts].astype(np.int64), reach[group_ends].astype(np.int64)


def ranges_to_indices(run_lo: np.ndarray, run_hi: np.ndarray) -> np.ndarray:
    """All integers of the ranges ``[run_lo_i, run_hi_i)``, range after range."""
    sizes = run_hi - run_lo
    return np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(
        run_lo - np.cumsum(sizes) + sizes, sizes
    )
