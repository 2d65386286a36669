"""``RayShardedSpanIndex``: a sharded index scanned on Ray actors, merged on the driver (the same results as
:class:`ShardedSpanIndex`); the shards must be at the same path on every node. See docs/guides/ray.md."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slice_st.encode import check_top_k
from slice_st.errors import SpanInputError
from slice_st.index.ray_engine import check_address, claim_workers, connect_ray, require_ray
from slice_st.index.sharded import ShardedSpanIndex, empty_top_spans, load_shards, merge_top_spans
from slice_st.index.span_index import SpanIndex

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


class _ShardScanner:
    """A Ray actor: some shards, memory-mapped, scanned as one :class:`ShardedSpanIndex`."""

    def __init__(self, paths: list[str], model, threads: int) -> None:
        torch.set_num_threads(max(1, threads))
        self.index = ShardedSpanIndex.load(paths, model, mmap=True)

    def scan(self, queries: np.ndarray, k: int, min_span: int, max_span: int, **options):
        return self.index.scan(torch.from_numpy(queries), k, min_span, max_span, **options)


class RayShardedSpanIndex(ShardedSpanIndex):
    """:class:`ShardedSpanIndex` whose scans run on ``workers`` Ray actors (contiguous runs of shards, balanced by
    units): the same results. :meth:`close` (or ``with``) ends the actors, and Ray when it was started here.

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
            model = ray.put(self.model)
            scanner = ray.remote(_ShardScanner).options(num_cpus=num_cpus)
            self._actors = [scanner.remote([paths[i] for i in group], model, int(num_cpus)) for group in groups]
        except BaseException:
            self.close()
            raise

    @classmethod
    def load(cls, paths, model: SentenceTransformer | None = None, mmap: bool = True, **options) -> RayShardedSpanIndex:
        """Open shards by path (a directory of shards or a Ray-built index stands for its shards) and start the
        actors; ``options``: ``address``, ``workers``, ``num_cpus`` (as the constructor)."""
        directories, shards = load_shards(paths, model, mmap=mmap)
        return cls(shards, directories, **options)

    @property
    def workers(self) -> int:
        return len(self._actors)

    def _scanner(self, wanted, approximate: bool, candidates: int | None, nprobe: int | None):
        """:meth:`ShardedSpanIndex.scan` fanned out to the actors, merged in shard order."""
        if not self._actors:
            raise SpanInputError("This RayShardedSpanIndex is closed.")
        ray = require_ray()

        options = {"approximate": approximate, "candidates": candidates, "nprobe": nprobe}

        def scan(query_vectors: torch.Tensor, k: int):
            queries = ray.put(np.ascontiguousarray(query_vectors.float().cpu().numpy()))
            spans = wanted.min_span, wanted.max_span
            found = ray.get([actor.scan.remote(queries, k, *spans, **options) for actor in self._actors])
            running = empty_top_spans(len(query_vectors), k)
            for part, base in zip(found, self._group_bases):
                running = merge_top_spans(running, part, base)
            return running

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
    paths = paths if isinstance(paths, (list, tuple)) else [paths]
    directories, shards = load_shards(paths, model, device=device, **model_options)
    if ray is not None:
        return RayShardedSpanIndex(shards, directories, address=ray, workers=workers)
    return shards[0] if len(shards) == 1 else ShardedSpanIndex(shards)
