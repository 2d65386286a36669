"""The index protocol: what searching asks of an index (:class:`SpanStore`, which :class:`SpanIndex` and
:class:`ShardedSpanIndex` implement and :mod:`slice_st.index.search` relies on), and what the Ray build asks of the
index class (:class:`ShardBuilder`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

    from slice_st.config import SpanConfig
    from slice_st.index.calibration import Calibration
    from slice_st.index.search import IndexMatch

#: The top spans of a scan: ``(scores, start unit rows, lengths)``, each ``(Q, k)`` (unit -1: none).
TopSpans = tuple[np.ndarray, np.ndarray, np.ndarray]


class SpanStore(Protocol):
    """An index the search driver ranks. Units are numbered across the index; spans are (start unit row, length).

    - ``embed_queries``: unit-normalised query vectors ``(Q, d)``, float32 on the CPU.
    - ``check_approximate``: raise when ``approximate=True`` cannot be served (no candidate stage).
    - ``scanner``: ``scan(query_vectors, k)``, the ``k`` best spans of ``wanted``'s lengths by cosine per query.
    - ``to_matches``: matches of spans with their scores and cosines (``None``: the scores), ``threshold`` applied.
    - ``unit_flags``: the scorer's flags of every unit row and their mark prefix.
    - ``locate``: spans as ``(document, first unit, end unit)``, in their documents' units.
    """

    model: SentenceTransformer
    span_config: SpanConfig
    calibration: Calibration | None

    def __len__(self) -> int: ...
    @property
    def num_units(self) -> int: ...
    @property
    def texts(self) -> list[str]: ...
    @property
    def doc_ids(self) -> list[str]: ...
    def embed_queries(self, queries: Sequence[str], batch_size: int = 32) -> torch.Tensor: ...
    def check_approximate(self, approximate: bool) -> None: ...
    def scanner(
        self, wanted: SpanConfig, approximate: bool, candidates: int | None, nprobe: int | None
    ) -> Callable[[torch.Tensor, int], TopSpans]: ...
    def to_matches(
        self,
        query_index: int,
        scores: Any,
        units: Any,
        lengths: Any,
        threshold: float | None,
        cosines: Any = None,
    ) -> list[IndexMatch]: ...
    def unit_flags(self) -> tuple[np.ndarray, np.ndarray]: ...
    def locate(
        self, units: np.ndarray, lengths: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


class ShardBuilder(Protocol):
    """The index class the Ray build makes each shard with (``SpanIndex``): ``build`` one, then ``save`` it; a
    compressed build ``load`` s each shard to sample its units, then to ``compress(codebooks=...)`` and ``save`` it."""

    def build(self, texts: Any, model: Any, ids: Any = None, **options: Any) -> Any: ...
    def load(self, path: Any, model: Any = None, mmap: bool = True, **options: Any) -> Any: ...
