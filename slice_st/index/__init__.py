"""Corpus search without a vector per span: :class:`SpanIndex` (build, add, save/load, search), several searched
together (:class:`ShardedSpanIndex`), built and searched on Ray, and a cosine → STS 0–5 :class:`Calibration`."""

from slice_st.index.calibration import Calibration
from slice_st.index.ray_engine import RayBuild
from slice_st.index.search import IndexMatch
from slice_st.index.sharded import RayShardedSpanIndex, ShardedSpanIndex, open_index
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
