"""Corpus search without a vector per span: :class:`SpanIndex`, :class:`ShardedSpanIndex`, calibration.

One file per responsibility: ``span_index`` (build, add, remove, merge, search, save/load),
``sharded`` (several indexes searched together), ``ray_engine`` (a sharded index built on Ray, resumable),
``ray_search`` (its shards scanned on Ray actors), ``search`` (option checks, ranking, the match type),
``candidates`` (the FAISS candidate stage), ``encoding`` (documents into arrays, multi-process
encoding), ``storage`` (manifest, atomic writes, the writer lock, checksums), ``fingerprint`` (which model built
an index) and ``calibration`` (cosine → STS 0–5).
"""

from slice_st.errors import IndexBusyError, IndexConflictError
from slice_st.index.calibration import (
    CALIBRATION_FILE,
    Calibration,
    fit_calibration,
    fit_sts_calibration,
    sts_pair_cosines,
)
from slice_st.index.fingerprint import model_fingerprint, model_identity, model_source
from slice_st.index.ray_engine import RayBuild, build_on_ray
from slice_st.index.ray_search import RayShardedSpanIndex, open_index
from slice_st.index.search import IndexMatch, search_documents
from slice_st.index.sharded import ShardedSpanIndex, merge_top_spans
from slice_st.index.span_index import SpanIndex
from slice_st.index.storage import (
    INDEX_FORMAT_VERSION,
    LOCK_FILE,
    MANIFEST,
    SHARD_LIST,
    check_index_target,
    index_lock,
    read_manifest,
    shard_directories,
)

__all__ = [
    "SpanIndex",
    "ShardedSpanIndex",
    "open_index",
    "search_documents",
    "IndexMatch",
    "model_fingerprint",
    "model_identity",
    "model_source",
    "shard_directories",
    "read_manifest",
    "RayBuild",
    "RayShardedSpanIndex",
    "build_on_ray",
    "merge_top_spans",
    "SHARD_LIST",
    "INDEX_FORMAT_VERSION",
    "MANIFEST",
    "LOCK_FILE",
    "Calibration",
    "CALIBRATION_FILE",
    "fit_calibration",
    "fit_sts_calibration",
    "sts_pair_cosines",
    "IndexBusyError",
    "IndexConflictError",
    "check_index_target",
    "index_lock",
]
