"""Saved indexes searched together unmerged: :class:`ShardedSpanIndex`, :class:`RayShardedSpanIndex` (shards scanned
on Ray actors, at the same path on every node), :func:`open_index`. See docs/guides/ray.md."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slice_st._checks import check_top_k
from slice_st.errors import SpanInputError
from slice_st.index import storage
from slice_st.index.base import TopSpans
from slice_st.index.calibration import calibrated_degree
from slice_st.index.compressed import DEFAULT_CANDIDATES
from slice_st.index.ray_cluster import check_address, claim_workers, connect_ray, require_ray
from slice_st.index.search import IndexMatch, cached_unit_flags, check_search
from slice_st.index.span_index import SpanIndex, check_alike
from slice_st.index.storage import shard_directories

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


def merge_top_spans(running: TopSpans | None, found: TopSpans, base: int) -> TopSpans:
    """The k best of ``running`` (``None``: nothing yet) and one shard's ``found`` (each ``(scores, units, lengths)``,
    ``(Q, k)``; the shard starts at unit ``base``), ties to the earlier shards, as one scan of all shards ranks them.

    >>> top = merge_top_spans(None, (np.array([[0.9, 0.5]]), np.array([[3, 1]]), np.array([[2, 1]])), 0)
    >>> merge_top_spans(top, (np.array([[0.7, 0.1]]), np.array([[0, 4]]), np.array([[1, 1]])), 10)[1]
    array([[ 3, 10]])
    """
    found = (found[0], np.where(found[1] >= 0, found[1] + base, -1), found[2])
    if running is None:
        return found
    both = [np.concatenate(pair, axis=1) for pair in zip(running, found)]
    # ties: the earlier shard first
    order = np.argsort(-both[0], axis=1, kind="stable")[:, : running[0].shape[1]]
    return tuple(np.take_along_axis(values, order, axis=1) for values in both)


def top_documents(
    parts: Sequence[tuple[np.ndarray, np.ndarray]], count: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` best of several ``(scores, documents)`` lists (``(Q, n)`` each, in shard order), ties to the
    earlier list: merged in any grouping of consecutive lists, the same as merged at once."""
    values = np.concatenate([part[0] for part in parts], axis=1)
    docs = np.concatenate([part[1] for part in parts], axis=1)
    order = np.argsort(-values, axis=1, kind="stable")[:, :count]
    return np.take_along_axis(values, order, axis=1), np.take_along_axis(docs, order, axis=1)


def load_shards(
    paths, model: SentenceTransformer | str | None = None, mmap: bool = True, **model_options
) -> tuple[list[str], list[SpanIndex]]:
    """The shard folders of ``paths`` and the shards loaded, the model once (``model_options``: its load options)."""
    directories = shard_directories(paths)
    first = SpanIndex.load(directories[0], model, mmap=mmap, **model_options)
    return directories, [first] + [
        SpanIndex.load(path, first.model, mmap=mmap) for path in directories[1:]
    ]


class ShardedSpanIndex:
    """Several indexes (shards, e.g. built in parallel) searched together without merging them in memory.

    Each shard is scanned on its own and the top-k lists merged: the results of :meth:`SpanIndex.merge` of the shards
    (``text_index`` numbered across them). Shards share the model and span settings; document ids are unique.

    Args:
        shards: Loaded :class:`SpanIndex` shards (same model and span settings).

    Example:
        >>> from slice_st.index import ShardedSpanIndex
        >>> shards = ShardedSpanIndex.load(["runs/shard-0", "runs/shard-1"])        # doctest: +SKIP
        >>> shards.search("my bag was lost", top_k=5)[0]                             # doctest: +SKIP
    """

    def __init__(self, shards: Sequence[SpanIndex]) -> None:
        self.shards = check_alike(shards, "shard", "ShardedSpanIndex")
        self.model, self.span_config = self.shards[0].model, self.shards[0].span_config
        self.calibration = next(
            (shard.calibration for shard in self.shards if shard.calibration), None
        )
        self._unit_bases = np.cumsum([0] + [shard.num_units for shard in self.shards])
        self._doc_bases = np.cumsum([0] + [len(shard) for shard in self.shards])
        self._scratch = storage.Scratch()

    @classmethod
    def load(
        cls,
        paths: str | os.PathLike | Sequence[str | os.PathLike],
        model: SentenceTransformer | None = None,
        mmap: bool = True,
    ) -> ShardedSpanIndex:
        """Open shards by path; a directory without ``manifest.json`` stands for the index directories inside it."""
        return cls(load_shards(paths, model, mmap=mmap)[1])

    def __len__(self) -> int:
        return int(self._doc_bases[-1])

    def __repr__(self) -> str:
        first, config = self.shards[0], self.span_config
        model = first.model_name or first.model_path or "unnamed"
        return (
            f"{type(self).__name__}(shards={len(self.shards)}, model={model!r}, "
            f"documents={len(self)}, units={self.num_units}, unit={config.unit!r}, "
            f"spans={config.min_span}..{config.max_span})"
        )

    def documents(self) -> list[dict[str, Any]]:
        """:meth:`SpanIndex.documents` of every shard, in order."""
        return [row for shard in self.shards for row in shard.documents()]

    @property
    def num_units(self) -> int:
        return int(self._unit_bases[-1])

    @property
    def doc_ids(self) -> list[str]:
        return [doc_id for shard in self.shards for doc_id in shard.doc_ids]

    @property
    def texts(self) -> list[str]:
        return [text for shard in self.shards for text in shard.texts]

    def embed_queries(
        self, queries: Sequence[str], batch_size: int = 32, **kwargs: Any
    ) -> torch.Tensor:
        return self.shards[0].embed_queries(queries, batch_size=batch_size, **kwargs)

    #: :meth:`SpanIndex.search` over all shards (same options and ranking; each shard scanned, the top spans merged).
    search = SpanIndex.search
    _search_vectors = SpanIndex._search_vectors
    _search_candidates = SpanIndex._search_candidates
    #: The exhaustive search scans every shard's exact tier (:meth:`_search_embedded` decides when).
    _compressed = None

    def _search_embedded(self, wanted, approximate, candidates, nprobe, options, *embedded):
        """:meth:`SpanIndex.search` of embedded queries: when every shard is compressed, each query's ``candidates``
        best documents over all shards by the compressed scans (:meth:`_best_document_scores`), searched exactly
        together (their rows read from the shards' exact tiers); else every shard's exact tier scanned."""
        count = candidates or DEFAULT_CANDIDATES
        tiers = [shard._compressed for shard in self.shards]
        # every shard compressed, in one dtype: their candidates make one exact index
        alike = None not in tiers and len({shard.dtype for shard in self.shards}) == 1
        if not alike:
            self.require_exact_tier("Searching shards of which some are not compressed alike")
        if self.exact_tier and (approximate or not alike or count >= len(self)):
            search = SpanIndex._search_embedded
            return search(self, wanted, approximate, candidates, nprobe, options, *embedded)
        query_texts, vectors, profiles, top_k = embedded
        if count >= len(self):  # every document (re-encoded: no shard keeps its exact tier)
            docs = np.tile(np.arange(len(self)), (len(query_texts), 1))
        else:
            docs = self._best_document_scores(vectors, wanted.min_span, wanted.max_span, count)[1]
        options = options | {"top_k": top_k}
        return self._search_candidates(docs, query_texts, vectors, profiles, wanted, options)

    @property
    def exact_tier(self) -> bool:
        """Whether every shard keeps its exact tier (see :attr:`SpanIndex.exact_tier`)."""
        return all(shard.exact_tier for shard in self.shards)

    def require_exact_tier(self, what: str) -> None:
        """:meth:`SpanIndex.require_exact_tier` of every shard."""
        for shard in self.shards:
            shard.require_exact_tier(what)

    def _documents(
        self, docs: np.ndarray, widen: bool = True, array: storage.ArrayMaker = storage.fresh_array
    ) -> SpanIndex:
        """One exact index (in memory) of documents ``docs`` (sorted, numbered across the shards), each shard's rows
        read from its exact tier (in arrays from ``array``) and widened to float32 (``widen`` is always so here), with
        the shards' unit flags (a unit's depend on its own document only)."""
        position = np.searchsorted(self._doc_bases, docs, side="right") - 1
        parts = [
            self.shards[shard]._documents(
                docs[position == shard] - self._doc_bases[shard],
                True,
                lambda key, shape, dtype, shard=shard: array((shard, key), shape, dtype),
            )
            for shard in np.unique(position).tolist()
        ]
        sub = SpanIndex.merge(parts)
        sub.calibration = self.calibration
        flags = np.concatenate([part.unit_flags()[0] for part in parts])
        cached_unit_flags(sub, sub.arrays["unit_chars"], lambda: flags)
        return sub

    def _best_document_scores(
        self, vectors, min_span: int, max_span: int, count: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The compressed scans' ``(Q, count)`` best approximate cosines and their documents (numbered across the
        shards; -1: none), best first."""
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        for shard, base in zip(self.shards, self._doc_bases):
            args = (vectors, shard.arrays, len(shard), count, min_span, max_span)
            assert shard._compressed is not None  # the caller checked every shard has a tier
            found = shard._compressed.best_document_scores(*args, shard.span_config.min_span)
            parts.append((found[0], np.where(found[1] >= 0, found[1] + base, -1)))
        return top_documents(parts, count)

    def shard_of(self, doc_index: int) -> tuple[SpanIndex, int]:
        """The shard holding document ``doc_index`` (numbered across the shards) and its position there."""
        position = int(np.searchsorted(self._doc_bases, doc_index, side="right")) - 1
        return self.shards[position], doc_index - int(self._doc_bases[position])

    def unit_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """The shards' unit flags laid end to end and their mark prefix, computed once (the shards are fixed)."""
        return cached_unit_flags(
            self, self._unit_bases, lambda: np.concatenate([s.unit_flags()[0] for s in self.shards])
        )

    def locate(
        self, units: np.ndarray, lengths: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`SpanIndex.locate` for units numbered across the shards; documents numbered across them too."""
        units, lengths = np.asarray(units, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
        positions = np.searchsorted(self._unit_bases, units, side="right") - 1
        docs, first, end = (np.zeros(len(units), dtype=np.int64) for _ in range(3))
        for position in np.unique(positions).tolist():
            rows = positions == position
            shard_docs, shard_first, shard_end = self.shards[position].locate(
                units[rows] - self._unit_bases[position], lengths[rows]
            )
            docs[rows] = shard_docs + self._doc_bases[position]
            first[rows], end[rows] = shard_first, shard_end
        return docs, first, end

    def check_approximate(self, approximate: bool) -> None:
        if approximate:
            self.require_exact_tier("approximate search (the FAISS candidate stage)")
        missing = [
            position for position, shard in enumerate(self.shards) if shard._candidates is None
        ]
        if approximate and missing:
            raise SpanInputError(
                f"approximate=True needs a candidate stage in every shard; shards {missing} lack one."
            )

    def scan(
        self,
        query_vectors: torch.Tensor,
        k: int,
        min_span: int | None = None,
        max_span: int | None = None,
        *,
        approximate: bool = False,
        candidates: int | None = None,
        nprobe: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The raw top-``k`` spans of unit-normalised query vectors over all shards: ``(Q, k)`` scores, units (numbered
        across the shards, -1: none) and lengths; what :meth:`search` ranks into matches."""
        wanted = check_search(self.span_config, k, None, min_span, max_span, candidates)
        self.check_approximate(approximate)
        return self.scanner(wanted, approximate, candidates, nprobe)(query_vectors, k)

    def scanner(self, wanted, approximate: bool, candidates: int | None, nprobe: int | None):
        """``scan(query_vectors, k)``: shard by shard, merged into a running top-k (:func:`merge_top_spans`)."""

        def scan(query_vectors: torch.Tensor, k: int) -> TopSpans:
            running = None
            for shard, base in zip(self.shards, self._unit_bases):
                if approximate:
                    found = shard.scanner(wanted, True, candidates, nprobe)(query_vectors, k)
                else:  # the k-th score so far lets the exact scan skip what cannot enter
                    floor = None if running is None else running[0][:, -1].copy()
                    floor = floor if floor is not None and np.isfinite(floor).all() else None
                    found = shard.top_spans(
                        query_vectors, k, wanted.min_span, wanted.max_span, floor
                    )
                running = merge_top_spans(running, found, base)
            return running

        return scan

    def to_matches(
        self, query_index: int, scores, units, lengths, threshold, cosines=None
    ) -> list[IndexMatch]:
        matches = []
        for score, unit, length, cosine in zip(
            scores, units, lengths, scores if cosines is None else cosines
        ):
            position = int(np.searchsorted(self._unit_bases, unit, side="right")) - 1
            found = [score], [int(unit - self._unit_bases[position])], [length], threshold, [cosine]
            calibrated = calibrated_degree(self.calibration, cosine)
            for match in self.shards[position].to_matches(query_index, *found):
                text_index = int(match.text_index + self._doc_bases[position])
                matches.append(
                    dataclasses.replace(match, text_index=text_index, calibrated=calibrated)
                )
        return matches

    def info(self) -> dict[str, Any]:
        """Totals over the shards, and each shard's :meth:`SpanIndex.info`."""
        infos = [shard.info() for shard in self.shards]
        totals = {"shards": len(self.shards), "documents": len(self), "units": self.num_units}
        totals["array_bytes"] = sum(i["array_bytes"] for i in infos)
        model = {key: infos[0][key] for key in ("model_name", "model_fingerprint")}
        return totals | model | {"per_shard": infos}


class _ShardScanner:
    """A Ray actor: some shards, memory-mapped, scanned as one :class:`ShardedSpanIndex`."""

    def __init__(self, paths: list[str], model: SentenceTransformer, threads: int) -> None:
        torch.set_num_threads(max(1, threads))
        self.index = ShardedSpanIndex.load(paths, model, mmap=True)

    def scan(self, queries: np.ndarray, k: int, min_span: int, max_span: int, **options):
        return self.index.scan(torch.from_numpy(queries), k, min_span, max_span, **options)

    def best_documents(self, queries: np.ndarray, min_span: int, max_span: int, count: int):
        vectors = torch.from_numpy(queries)
        return self.index._best_document_scores(vectors, min_span, max_span, count)


class RayShardedSpanIndex(ShardedSpanIndex):
    """:class:`ShardedSpanIndex` whose scans run on ``workers`` Ray actors (contiguous runs of shards, balanced by
    units): the same results. Compressed shards (coded alike, e.g. by a compressed Ray build) are searched through
    their compressed scans on the actors, then each query's candidate documents exactly here. :meth:`close` (or
    ``with``) ends the actors, and Ray when it was started here.

    Args:
        shards: The loaded shards.
        paths: Their folders (the actors load them).
        address: Ray address (``None``: start Ray here; ``"auto"``, ``HOST:PORT``, ``ray://HOST:PORT``).
        workers: Number of actors (default: one per shard, at most the cluster's CPUs).
        num_cpus: CPUs per actor.

    Example:
        >>> with RayShardedSpanIndex.load("runs/ray-index", workers=2) as index:  # doctest: +SKIP
        ...     index.search("my bag was lost", top_k=5)
    """

    def __init__(
        self,
        shards: Sequence[SpanIndex],
        paths: Sequence[str | os.PathLike],
        *,
        address: str | None = None,
        workers: int | None = None,
        num_cpus: float = 1,
    ) -> None:
        super().__init__(shards)
        paths = [os.path.abspath(os.fspath(path)) for path in paths]
        if len(paths) != len(self.shards):
            raise SpanInputError(f"Got {len(paths)} shard paths for {len(self.shards)} shards.")
        check_top_k(workers, "workers", optional=True)
        self._actors: list[Any] = []
        self._started = connect_ray(address)
        try:
            ray = require_ray()
            workers = claim_workers(workers, len(paths), num_cpus)
            groups = _contiguous_groups([shard.num_units for shard in self.shards], workers)
            self._group_bases = [int(self._unit_bases[group[0]]) for group in groups]
            self._group_doc_bases = [int(self._doc_bases[group[0]]) for group in groups]
            model = ray.put(self.model)
            scanner = ray.remote(_ShardScanner).options(num_cpus=num_cpus)
            self._actors = [
                scanner.remote([paths[i] for i in group], model, int(num_cpus)) for group in groups
            ]
        except BaseException:
            self.close()
            raise

    @classmethod
    def load(
        cls, paths, model: SentenceTransformer | None = None, mmap: bool = True, **options
    ) -> RayShardedSpanIndex:
        """Open shards by path (a directory of shards or a Ray-built index stands for its shards) and start the
        actors; ``options``: ``address``, ``workers``, ``num_cpus`` (as the constructor)."""
        directories, shards = load_shards(paths, model, mmap=mmap)
        return cls(shards, directories, **options)

    def _best_document_scores(
        self, vectors, min_span: int, max_span: int, count: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The compressed scans on the actors, each of its shards' best documents, merged here in shard order (the
        candidates' exact search then reads their rows from the shards, memory-mapped here)."""
        if not self._actors:
            raise SpanInputError("This RayShardedSpanIndex is closed.")
        ray = require_ray()
        queries = ray.put(np.ascontiguousarray(vectors.float().cpu().numpy()))
        spans = min_span, max_span
        found = ray.get(
            [actor.best_documents.remote(queries, *spans, count) for actor in self._actors]
        )
        parts = [
            (values, np.where(docs >= 0, docs + base, -1))
            for (values, docs), base in zip(found, self._group_doc_bases)
        ]
        return top_documents(parts, count)

    @property
    def workers(self) -> int:
        return len(self._actors)

    def scanner(self, wanted, approximate: bool, candidates: int | None, nprobe: int | None):
        """:meth:`ShardedSpanIndex.scan` fanned out to the actors, merged in shard order."""
        if not self._actors:
            raise SpanInputError("This RayShardedSpanIndex is closed.")
        ray = require_ray()
        options = {"approximate": approximate, "candidates": candidates, "nprobe": nprobe}

        def scan(query_vectors: torch.Tensor, k: int):
            queries = ray.put(np.ascontiguousarray(query_vectors.float().cpu().numpy()))
            spans = wanted.min_span, wanted.max_span
            found = ray.get(
                [actor.scan.remote(queries, k, *spans, **options) for actor in self._actors]
            )
            return functools.reduce(
                lambda top, part: merge_top_spans(top, *part), zip(found, self._group_bases), None
            )

        return scan

    def close(self) -> None:
        """End the actors (and Ray, if this index started it)."""
        actors, self._actors = self._actors, []
        ray = require_ray()
        for actor in actors:
            ray.kill(actor)
        if self._started and ray.is_initialized():
            ray.shutdown()
        self._started = False

    def __enter__(self) -> RayShardedSpanIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def info(self) -> dict[str, Any]:
        return super().info() | {"workers": self.workers}


def _contiguous_groups(sizes: Sequence[int], groups: int) -> list[list[int]]:
    """Split positions ``0..len(sizes)-1`` into ``groups`` non-empty contiguous runs of about equal total size.

    >>> _contiguous_groups([5, 5, 5, 5], 2), _contiguous_groups([1, 1, 10], 2)
    ([[0, 1], [2, 3]], [[0, 1], [2]])
    """
    cumulative = np.cumsum(sizes, dtype=np.float64)
    targets = cumulative[-1] * np.arange(1, groups) / groups
    cuts = np.searchsorted(cumulative, targets, side="left") + 1
    bounds = [0]
    for number, cut in enumerate(cuts, start=1):  # every run non-empty
        bounds.append(int(min(max(cut, bounds[-1] + 1), len(sizes) - groups + number)))
    bounds.append(len(sizes))
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]


def open_index(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    model: SentenceTransformer | str | None = None,
    *,
    device: str | None = None,
    ray: str | None = None,
    workers: int | None = None,
    **model_options: Any,
) -> SpanIndex | ShardedSpanIndex:
    """One saved index, or several searched together as a :class:`ShardedSpanIndex`; with ``ray`` a
    :class:`RayShardedSpanIndex` (close it).

    Args:
        paths: An index folder, several, or a folder of index folders (shards).
        model: The model, or its path or Hub id (default: the one the index records).
        device: Where a model loaded here runs.
        ray: A Ray address (``"auto"``, ``HOST:PORT``, ``ray://HOST:PORT``) or ``"local"`` (Ray started here).
        workers: Ray actors (default: as many as the cluster has room for).
        model_options: :func:`slice_st.load_model` options for a model loaded here (``backend``, ``threads``, …).

    Returns:
        A :class:`SpanIndex`, :class:`ShardedSpanIndex` or :class:`RayShardedSpanIndex`.

    Example:
        >>> index = open_index(["runs/shard-0", "runs/shard-1"])  # doctest: +SKIP
    """
    if ray is not None:
        check_address(ray)
        require_ray()
    directories, shards = load_shards(paths, model, device=device, **model_options)
    if ray is not None:
        return RayShardedSpanIndex(shards, directories, address=ray, workers=workers)
    return shards[0] if len(shards) == 1 else ShardedSpanIndex(shards)
