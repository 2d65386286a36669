"""Corpus search without a vector per span: :class:`SpanIndex`, :class:`ShardedSpanIndex`, calibration.

One file per responsibility: ``span_index`` (build, add, remove, merge, search, save/load),
``sharded`` (several indexes searched together), ``ray_engine`` (a sharded index built on Ray, resumable),
``ray_search`` (its shards scanned on Ray actors), ``search`` (option checks, ranking, the match type),
``candidates`` (the FAISS candidate stage), ``encoding`` (documents into arrays, multi-process
encoding), ``storage`` (manifest, atomic writes, the writer lock, checksums), ``fingerprint`` (which model built
an index) and ``calibration`` (cosine → STS 0–5).
"""

from slice_st.index.calibration import Calibration
from slice_st.index.ray_engine import RayBuild
from slice_st.index.ray_search import RayShardedSpanIndex, open_index
from slice_st.index.search import IndexMatch
from slice_st.index.sharded import ShardedSpanIndex
from slice_st.index.span_index import SpanIndex

__all__ = [
    "SpanIndex",
    "ShardedSpanIndex",
    "open_index",
    "RayShardedSpanIndex",
    "RayBuild",
    "IndexMatch",
    "Calibration",
]
