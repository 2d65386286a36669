"""The compressed tier of a :class:`~slice_st.SpanIndex` (``compression="pq48"``): per unit a coarse centroid id and
product-quantisation (PQ) codes of the unit vector's residual, and log-scale codes of its span norms. A query's lookup
tables give every unit's approximate dot product; the prefix-sum scan then gives every span's approximate cosine and
each document's best; the top documents go to the exact tier (the float16 arrays on disk). FAISS trains the k-means and
PQ codebooks and computes the codes; the table lookups and the norm codes are written here (FAISS's PQ search returns
the nearest codes, not the per-unit dot products a span sum needs)."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from slice_st._extras import needs_extra
from slice_st.errors import SpanInputError
from slice_st.index.candidates import ranges_to_indices
from slice_st.index.storage import DataFolder, array_digest, save_array
from slice_st.spans import start_peak_scores

#: The arrays of the tier, each saved as ``compressed_<name>.npy`` (loaded into memory: they are the resident index).
ARRAYS = ("centroids", "codebooks", "norm_table", "coarse", "codes", "norm_codes")
#: The arrays shared by every unit (what shards coded alike share).
CODEBOOK_ARRAYS = ARRAYS[:3]
#: The arrays with a row per unit.
_CODE_ARRAYS = ARRAYS[3:]
#: Default candidate documents passed from the compressed scan to the exact tier (see docs/guides/corpus-index.md).
DEFAULT_CANDIDATES = 500
#: Training sample: at most this many unit vectors (k-means also stops at 64 per centroid).
TRAIN_SAMPLE = 65_536
_SPEC = re.compile(r"pq(\d+)((?:[,-](?:ivf\d+|norms\d+))*)")


@dataclass(frozen=True)
class CompressionSpec:
    """``pq<M>[,ivf<C>][,norms<bits>]``: ``M`` one-byte PQ codes per unit, ``C`` coarse centroids (default: chosen
    by the number of units, at most 1024), span norms in ``bits`` (4 or 8) per span length."""

    subquantizers: int
    nlist: int | None = None
    norm_bits: int = 4

    @classmethod
    def parse(cls, text: str | CompressionSpec, dim: int) -> CompressionSpec:
        if isinstance(text, CompressionSpec):
            spec = text
        else:
            match = _SPEC.fullmatch(str(text).strip().lower()) if isinstance(text, str) else None
            if match is None:
                raise SpanInputError(
                    f"compression must look like 'pq48', 'pq48,ivf1024' or 'pq32,norms8', got {text!r:.60}."
                )
            options = dict(re.findall(r"(ivf|norms)(\d+)", match.group(2)))
            spec = cls(
                int(match.group(1)),
                int(options["ivf"]) if "ivf" in options else None,
                int(options.get("norms", 4)),
            )
        if spec.subquantizers < 1 or dim % spec.subquantizers:
            raise SpanInputError(
                f"compression pq{spec.subquantizers}: the number of PQ codes per unit must divide the dimension {dim} "
                f"(e.g. pq{_divisor_near(dim, 48)})."
            )
        if spec.nlist is not None and not 1 <= spec.nlist <= 65536:
            raise SpanInputError(
                f"compression ivf{spec.nlist}: the coarse centroids must number 1..65536."
            )
        if spec.norm_bits not in (4, 8):
            raise SpanInputError(
                f"compression norms{spec.norm_bits}: span norms are coded in 4 or 8 bits."
            )
        return spec

    def __str__(self) -> str:
        ivf = "" if self.nlist is None else f",ivf{self.nlist}"
        return f"pq{self.subquantizers}{ivf},norms{self.norm_bits}"


def _divisor_near(dim: int, target: int) -> int:
    return min((m for m in range(1, dim + 1) if dim % m == 0), key=lambda m: abs(m - target))


class CompressedTier:
    """Codebooks (shared by every unit), and per unit: coarse id, PQ codes, span-norm codes."""

    def __init__(self, spec: CompressionSpec, arrays: dict[str, np.ndarray]) -> None:
        self.spec = spec
        self.centroids, self.codebooks, self.norm_table = (arrays[n] for n in CODEBOOK_ARRAYS)
        self.coarse, self.codes, self.norm_codes = (arrays[n] for n in _CODE_ARRAYS)
        self._inverse_table = _inverse_byte_table(self.norm_table, spec.norm_bits)

    @classmethod
    def train(cls, arrays, spec: CompressionSpec, seed: int = 0) -> CompressedTier:
        """Codebooks trained (FAISS) on a sample of the index's units, then every unit coded."""
        vectors, norms = arrays["unit_vectors"], arrays["span_norms"]
        rows = sample_rows(len(vectors), seed)
        sample = np.asarray(vectors[rows], dtype=np.float32)
        tier = cls.trained(sample, np.asarray(norms[rows], np.float32), spec, len(vectors), seed)
        return tier.extended(arrays, 0)

    @classmethod
    def trained(
        cls, sample: np.ndarray, sample_norms: np.ndarray, spec: CompressionSpec, total: int, seed=0
    ) -> CompressedTier:
        """A tier of codebooks and no units, trained on ``sample`` (unit vectors, float32) and ``sample_norms`` (their
        span norms) drawn by :func:`sample_rows` from ``total`` units (which set the default coarse centroids)."""
        with needs_extra("faiss", "a compressed index"):
            import faiss
        if total == 0:
            raise SpanInputError("The index is empty: nothing to train the compression on.")
        dim = sample.shape[1]
        nlist = spec.nlist or int(min(1024, max(1, 2 ** int(np.log2(max(total, 1) / 256)))))
        nlist = min(nlist, len(sample))
        kmeans = faiss.Kmeans(
            dim, nlist, niter=10, seed=seed, max_points_per_centroid=64, verbose=False
        )
        kmeans.train(sample)
        centroids = kmeans.centroids.astype(np.float16).astype(np.float32)  # stored in float16
        residuals = sample - centroids[_nearest(faiss, centroids, sample)]
        if len(residuals) < 256:  # 256 codewords per sub-quantiser: a tiny index repeats its units
            residuals = np.resize(residuals, (256, dim))
        pq = faiss.ProductQuantizer(dim, spec.subquantizers, 8)
        pq.train(np.ascontiguousarray(residuals))
        codebooks = faiss.vector_to_array(pq.centroids).reshape(spec.subquantizers, 256, -1)
        return cls(
            spec,
            {
                "centroids": centroids.astype(np.float16),
                "codebooks": codebooks.astype(np.float16),
                "norm_table": _norm_table(sample_norms, spec.norm_bits),
                **_empty_codes(spec, sample_norms.shape[1]),
            },
        )

    @classmethod
    def from_codebooks(cls, spec: CompressionSpec, arrays: dict[str, np.ndarray]) -> CompressedTier:
        """A tier of the codebook arrays ``arrays`` (those :meth:`codebook_arrays` gives) and no units."""
        codebooks = {name: np.asarray(arrays[name]) for name in CODEBOOK_ARRAYS}
        return cls(spec, codebooks | _empty_codes(spec, len(codebooks["norm_table"])))

    def coded(self, arrays) -> CompressedTier:
        """A tier of the units of ``arrays`` alone, coded with these codebooks (none of this tier's units)."""
        return self.subset(np.zeros(0, dtype=np.int64)).extended(arrays, 0)

    def extended(self, arrays, unit_base: int, block: int = 65_536) -> CompressedTier:
        """A copy with the units of ``arrays`` from ``unit_base`` on coded with these codebooks (appended)."""
        with needs_extra("faiss", "a compressed index"):
            import faiss
        vectors, norms = arrays["unit_vectors"], arrays["span_norms"]
        pq, centroids = self._faiss_pq(faiss), self.centroids.astype(np.float32)
        parts = {name: [getattr(self, name)[:unit_base]] for name in _CODE_ARRAYS}
        for lo in range(unit_base, len(vectors), block):
            values = np.asarray(vectors[lo : lo + block], dtype=np.float32)
            spans = np.asarray(norms[lo : lo + block], np.float32)
            coarse = _nearest(faiss, centroids, values)
            parts["coarse"].append(coarse.astype(self.coarse.dtype))
            parts["codes"].append(
                pq.compute_codes(np.ascontiguousarray(values - centroids[coarse]))
            )
            parts["norm_codes"].append(_norm_codes(spans, self.norm_table))
        return CompressedTier(
            self.spec, self.codebook_arrays() | {k: np.concatenate(v) for k, v in parts.items()}
        )

    def subset(self, rows: np.ndarray) -> CompressedTier:
        """The tier of the unit rows ``rows`` (a boolean mask or indices), in that order."""
        codes = {name: getattr(self, name)[rows] for name in _CODE_ARRAYS}
        return CompressedTier(self.spec, self.codebook_arrays() | codes)

    @classmethod
    def concatenated(cls, tiers: list[CompressedTier]) -> CompressedTier:
        """One tier of several coded with the same codebooks, units end to end."""
        codes = {name: np.concatenate([getattr(t, name) for t in tiers]) for name in _CODE_ARRAYS}
        return cls(tiers[0].spec, tiers[0].codebook_arrays() | codes)

    def codebook_digest(self) -> str:
        digest = hashlib.sha256(str(self.spec).encode())
        for values in self.codebook_arrays().values():
            digest.update(np.ascontiguousarray(values).tobytes())
        return digest.hexdigest()[:16]

    def codebook_arrays(self) -> dict[str, np.ndarray]:
        """The arrays every unit's codes refer to (:data:`CODEBOOK_ARRAYS`)."""
        return {name: getattr(self, name) for name in CODEBOOK_ARRAYS}

    def _faiss_pq(self, faiss):
        dim = self.centroids.shape[1]
        pq = faiss.ProductQuantizer(dim, self.spec.subquantizers, 8)
        faiss.copy_array_to_vector(
            np.ascontiguousarray(self.codebooks, dtype=np.float32).ravel(), pq.centroids
        )
        return pq

    def unit_dots(
        self, tables: tuple[torch.Tensor, torch.Tensor], lo: int, hi: int
    ) -> torch.Tensor:
        """Approximate ``(Q, hi - lo)`` dot products of the queries with units ``lo..hi`` from their lookup tables."""
        coarse_dots, flat = tables
        codes = torch.from_numpy(np.asarray(self.codes[lo:hi])).long()  # (B, M)
        codes += torch.arange(codes.shape[1]) * 256
        dots = coarse_dots[:, torch.from_numpy(np.asarray(self.coarse[lo:hi]).astype(np.int64))]
        if len(dots) == 1:  # one query: a gather of B x M table entries
            return dots + flat[0, codes].sum(dim=1)[None]
        # several: each unit's M rows of the transposed table summed, the kernel of an embedding bag
        return dots + torch.nn.functional.embedding_bag(codes, flat.T.contiguous(), mode="sum").T

    def lookup_tables(self, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per query: its dot product with every centroid ``(Q, C)``, and with every PQ codeword ``(Q, M * 256)``."""
        queries = queries.float()
        coarse_dots = queries @ torch.from_numpy(self.centroids.astype(np.float32)).T
        books = torch.from_numpy(self.codebooks.astype(np.float32))  # (M, 256, d / M)
        parts = queries.reshape(len(queries), books.shape[0], books.shape[2])
        flat = torch.einsum("qms,mcs->qmc", parts, books).reshape(len(queries), -1)
        return coarse_dots, flat.contiguous()

    def inverse_norms(self, lo: int, hi: int, columns: slice) -> torch.Tensor:
        """``(L, hi - lo)`` reciprocals of the decoded span norms of units ``lo..hi`` in ``columns`` (0: no such span),
        read from each code's byte through one table: the scan's per-block work that does not depend on the queries."""
        widths = np.arange(self.norm_table.shape[0])[columns]
        byte_of = widths // 2 if self.spec.norm_bits == 4 else widths
        codes = np.asarray(self.norm_codes[lo:hi]).T[byte_of]  # (L, hi - lo)
        return torch.from_numpy(self._inverse_table[widths[:, None], codes])

    def best_documents(self, *args: Any) -> np.ndarray:
        """``(Q, count)`` positions of each query's best documents by their best span's approximate cosine (``-1``:
        fewer documents have a span), best first; the arguments of :meth:`best_document_scores`."""
        return self.best_document_scores(*args)[1]

    def best_document_scores(
        self,
        queries: torch.Tensor,
        arrays,
        num_docs: int,
        count: int,
        min_span: int,
        max_span: int,
        built_min: int,
        block: int = 16_384,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each query's ``count`` best documents of ``num_docs`` by their best span (of ``min_span..max_span`` units,
        in an index built from ``built_min``) and their approximate cosines: ``(Q, count)`` each (``-inf`` / ``-1``:
        none), best first."""
        tables = self.lookup_tables(torch.nn.functional.normalize(queries.float(), dim=-1))
        bounds = np.asarray(arrays["segment_units"], dtype=np.int64)
        segment_docs = torch.from_numpy(np.array(arrays["segment_docs"], dtype=np.int64))
        total, reach = len(self.codes), max_span - 1
        best = torch.full((len(queries), num_docs), float("-inf"))
        columns = slice(min_span - built_min, max_span - built_min + 1)
        for lo in range(0, total, block):
            hi, stop = min(lo + block, total), min(lo + block + reach, total)
            dots = self.unit_dots(tables, lo, stop)
            inverse = self.inverse_norms(lo, stop, columns)
            inverse[:, hi - lo :] = 0  # spans starting past the block are the next block's
            peaks = start_peak_scores(dots, inverse, min_span)[:, : hi - lo]  # best at each start
            docs = segment_docs[np.searchsorted(bounds, np.arange(lo, hi), side="right") - 1]
            best.scatter_reduce_(1, docs.expand(len(queries), -1), peaks, "amax")
        count = min(count, num_docs)
        values, found = best.topk(count, dim=1)
        return values.numpy(), torch.where(torch.isfinite(values), found, -1).numpy()

    def span_count(self, block: int = 65_536) -> int:
        """The spans the coded units hold: span-norm codes that are not the last ("no such span")."""
        widths, bits = self.norm_table.shape[0], self.spec.norm_bits
        none, total = 2**bits - 1, 0
        for lo in range(0, len(self.norm_codes), block):
            codes = np.asarray(self.norm_codes[lo : lo + block])
            if bits == 4:  # even lengths in the low halves, odd ones in the high halves
                codes = np.stack([codes & 15, codes >> 4], axis=-1).reshape(len(codes), -1)
            total += int((codes[:, :widths] != none).sum())
        return total

    def info(self) -> dict[str, Any]:
        return {
            "spec": str(self.spec),
            "subquantizers": self.spec.subquantizers,
            "nlist": int(len(self.centroids)),
            "norm_bits": self.spec.norm_bits,
            "codebooks": self.codebook_digest(),
            "resident_bytes": sum(int(np.asarray(getattr(self, name)).nbytes) for name in ARRAYS),
        }

    def save(self, data_dir: str) -> dict[str, str]:
        samples = {}
        for name in ARRAYS:
            values = np.asarray(getattr(self, name))
            save_array(os.path.join(data_dir, f"compressed_{name}.npy"), values)
            samples[f"compressed_{name}"] = array_digest(values)
        return samples

    @classmethod
    def load(cls, data: DataFolder, info: dict[str, Any], units: int) -> CompressedTier:
        """The tier saved in an open data folder, read into memory (it is what a compressed index keeps resident)."""
        arrays = {name: data.array(f"compressed_{name}", mmap=False) for name in ARRAYS}
        spec = CompressionSpec.parse(info["spec"], arrays["centroids"].shape[1])
        if any(len(arrays[name]) != units for name in _CODE_ARRAYS):
            raise ValueError(
                "the compressed codes do not match the index's units (corrupt or half-written)"
            )
        coarse_max = int(arrays["coarse"].max(initial=0))
        if arrays["codes"].shape[1] != spec.subquantizers or coarse_max >= len(arrays["centroids"]):
            raise ValueError(
                "the compressed codes do not match their codebooks (corrupt or half-written)"
            )
        return cls(spec, arrays)


def sample_rows(total: int, seed: int = 0) -> np.ndarray:
    """The rows (sorted) of ``total`` units that train the codebooks: at most :data:`TRAIN_SAMPLE`, drawn by ``seed``.

    >>> sample_rows(5).tolist()
    [0, 1, 2, 3, 4]
    """
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(total, min(total, TRAIN_SAMPLE), replace=False))


def _nearest(faiss, centroids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each row's nearest centroid (L2), by FAISS."""
    index = faiss.IndexFlatL2(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    return index.search(np.ascontiguousarray(values, dtype=np.float32), 1)[1][:, 0].astype(np.int64)


def _empty_codes(spec: CompressionSpec, widths: int) -> dict[str, np.ndarray]:
    per_byte = 2 if spec.norm_bits == 4 else 1
    return {
        "coarse": np.zeros(0, dtype=np.uint16),  # parse allows at most 65536 centroids
        "codes": np.zeros((0, spec.subquantizers), dtype=np.uint8),
        "norm_codes": np.zeros((0, -(-widths // per_byte)), dtype=np.uint8),
    }


def _norm_table(sample: np.ndarray, bits: int) -> np.ndarray:
    """``(K, 2^bits)`` decoded norms: per span length a log-scale grid over the sample's range; the last code: none."""
    levels = 2**bits - 1
    table = np.full((sample.shape[1], levels + 1), np.nan, dtype=np.float32)
    for column in range(sample.shape[1]):
        values = sample[:, column]
        values = np.log(values[np.isfinite(values) & (values > 0)])
        lo, hi = np.percentile(values, [0.1, 99.9]) if len(values) else (0.0, 0.0)
        hi = max(hi, lo + 1e-3)
        table[column, :levels] = np.exp(np.linspace(lo, hi, levels))
    return table


def _inverse_byte_table(table: np.ndarray, bits: int) -> np.ndarray:
    """``(K, 256)``: per span length, the reciprocal of the norm a code byte holds for it (0: none), so decoding a
    block is one lookup (with 4 bits, the even lengths' code is a byte's low half, the odd lengths' its high half)."""
    with np.errstate(divide="ignore"):
        inverse = np.nan_to_num(1 / table.astype(np.float32), nan=0.0)
    byte = np.arange(256)
    if bits == 4:
        halves = np.where(np.arange(len(table))[:, None] % 2, byte >> 4, byte & 15)
        return np.take_along_axis(inverse, halves, axis=1)
    return inverse[:, np.minimum(byte, inverse.shape[1] - 1)]


def _norm_codes(norms: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Each norm's nearest code on its column's log grid (``nan``: the last code), packed two to a byte in 4 bits."""
    levels = table.shape[1] - 1
    logs = np.log(table[:, :levels])
    lo, step = logs[:, 0], (logs[:, -1] - logs[:, 0]) / max(levels - 1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        codes = np.rint((np.log(norms) - lo) / step)
    codes = np.where(
        np.isfinite(norms), np.clip(np.nan_to_num(codes, nan=0, neginf=0), 0, levels - 1), levels
    )
    codes = codes.astype(np.uint8)
    if levels + 1 == 16:
        if codes.shape[1] % 2:
            codes = np.concatenate([codes, np.full((len(codes), 1), levels, np.uint8)], axis=1)
        codes = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return codes


def candidate_rows(arrays, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The segments of documents ``docs`` (positions), and their unit rows in order."""
    segments = np.flatnonzero(np.isin(np.asarray(arrays["segment_docs"]), docs))
    bounds = np.asarray(arrays["segment_units"], dtype=np.int64)
    return segments, ranges_to_indices(bounds[segments], bounds[segments + 1])
