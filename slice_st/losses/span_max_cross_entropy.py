"""``SpanMaxCrossEntropyLoss``: the SLICE training loss, in sentence-transformers' loss style."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from sentence_transformers.base.losses.merged_forward import merge_feature_batches
from torch import Tensor, nn

from slice_st.config import get_span_config
from slice_st.losses._common import SliceLoss, batch_units, check_offsets, require_span_features
from slice_st.spans import best_span_scores, pool_units, span_cosines

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)


def query_vectors(output: dict[str, Any], unit: str) -> tuple[Tensor, Tensor]:
    """``((B, d), (B,) has_tokens)``: each row's mean non-special token vector, as ``best_spans`` encodes queries."""
    units = batch_units(output, unit)
    zeros = torch.zeros_like(units.num_units)
    total, count = pool_units(output["token_embeddings"], units.boundaries, zeros, units.num_units)
    return total / count.clamp(min=1)[:, None].to(total.dtype), count > 0


def column_span_scores(
    queries: Tensor,
    features: dict[str, Any],
    unit: str,
    min_span: int,
    max_span: int,
    shared: bool = False,
) -> Tensor:
    """Best-span cosine of each passage row of a forward pass (``features``) for its query (``(B,)``), or for every
    query (``(B, Q)``, ``shared``); rows without any span score ``-inf``. The gradient reaches the arg-max span's
    tokens and the queries."""
    units = batch_units(features, unit)
    tokens, query_input = features["token_embeddings"], queries if shared else queries[:, None, :]
    with torch.no_grad():  # find the arg-max spans cheaply, then differentiate only those
        best = best_span_scores(
            query_input, tokens, units.boundaries, units.num_units, min_span, max_span, top_k=1
        )
    scores = span_cosines(
        query_input, tokens, units.boundaries, best.starts[:, :, 0], best.ends[:, :, 0]
    )
    return scores if shared else scores[:, 0]


class SpanMaxCrossEntropyLoss(SliceLoss):
    """The SLICE loss (Orbach et al., 2024): the best span of the positive must beat the best span of the negative.

    For a triplet (query ``q``, positive passage, negative passages), span vectors being means of token vectors::

        sim(p)  = max over spans x of p with min_span..max_span units of (cos(avg W(q), avg W(x)) + 1) / 2
        L       = -λ·sim(p⁺) + log(exp(λ·sim(p⁺)) + Σ exp(λ·sim(p⁻)))

    Only the arg-max spans get gradient, which teaches token vectors to be averaged; the query vector is what
    :func:`slice_st.best_spans` uses at inference. Rows whose positive has no span are skipped (``skipped_rows``); a
    NaN loss raises. The model must tokenize with offsets (:func:`slice_st.config.enable_span_features`).

    Args:
        model: The ``SentenceTransformer`` to train, with span features
            (:func:`slice_st.config.enable_span_features`).
        scale: λ, the inverse temperature of the softmax over the best-span similarities.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"`` (``None``: the model's span setting).
        in_batch_negatives: Also use the other rows' passages as negatives (then anchor, positive pairs suffice).
        gather_across_devices: With ``in_batch_negatives``, also the passages of every other process (DDP).

    References:
        - Orbach et al. (2024), *Span-Aggregatable, Contextualized Word Embeddings for Effective Phrase Mining*:
          https://arxiv.org/abs/2405.07263

    Requirements:
        1. (query, passage holding a match, passages without) triplets.

    Inputs:
        +-------------------------------------------------+--------+
        | Texts                                           | Labels |
        +=================================================+========+
        | (anchor, positive, negative) triplets           | none   |
        +-------------------------------------------------+--------+
        | (anchor, positive, negative_1, ..., negative_n) | none   |
        +-------------------------------------------------+--------+
        | (anchor, positive) with in_batch_negatives=True | none   |
        +-------------------------------------------------+--------+

    Example:
        >>> import torch
        >>> from slice_st import SpanMaxCrossEntropyLoss, load_model
        >>> from slice_st.config import enable_span_features
        >>> model = enable_span_features(load_model())
        >>> loss = SpanMaxCrossEntropyLoss(model, max_span=4)
        >>> columns = [["plays the guitar"], ["A man is playing the guitar on stage."],
        ...            ["The stock market fell sharply today."]]
        >>> features = [model.preprocess(column) for column in columns]
        >>> value = loss(features, torch.tensor([0]))
        >>> bool(0 <= value.item() < 1)
        True
    """

    config_keys = (
        "scale",
        "min_span",
        "max_span",
        "unit",
        "in_batch_negatives",
        "gather_across_devices",
    )

    def __init__(
        self,
        model: SentenceTransformer,
        scale: float = 30.0,
        min_span: int = 1,
        max_span: int = 10,
        unit: str | None = None,
        in_batch_negatives: bool = False,
        gather_across_devices: bool = False,
    ) -> None:
        super().__init__()
        self.model, self.scale, self.skipped_rows = model, scale, 0
        config = get_span_config(model).replace(min_span=min_span, max_span=max_span, unit=unit)
        self.min_span, self.max_span, self.unit = config.min_span, config.max_span, config.unit
        require_span_features(model, type(self).__name__)
        self.in_batch_negatives = in_batch_negatives
        self.gather_across_devices = gather_across_devices

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> Tensor:
        columns = list(sentence_features)
        if len(columns) < (2 if self.in_batch_negatives else 3):
            raise ValueError(
                f"SpanMaxCrossEntropyLoss needs columns (anchor, positive, negative...), or (anchor, positive) with "
                f"in_batch_negatives=True; got {len(columns)} column(s)."
            )
        check_offsets(columns, self.unit)
        anchor = self.model(columns[0])
        queries, valid = query_vectors(anchor, self.unit)

        rows, num_columns = len(queries), len(columns) - 1
        passages = self._passage_outputs(columns[1:])
        spans = (self.unit, self.min_span, self.max_span)
        if self.in_batch_negatives:
            logits, targets = self._in_batch_logits(queries, passages, rows)
        else:
            repeated = [queries.repeat(len(out["token_embeddings"]) // rows, 1) for out in passages]
            scores = [
                column_span_scores(query, out, *spans) for query, out in zip(repeated, passages)
            ]
            # (B, 1 + n_negatives); positive first
            logits = torch.cat(scores).view(num_columns, rows).T
            targets = torch.zeros(rows, dtype=torch.long, device=logits.device)
        positive = logits.gather(1, targets[:, None])[:, 0]
        valid &= torch.isfinite(positive)
        if not bool(valid.all()):
            skipped = int((~valid).sum())
            self.skipped_rows += skipped
            logger.warning(
                "SpanMaxCrossEntropyLoss skipped %d row(s): empty anchor or positive.", skipped
            )
        if not bool(valid.any()):
            return anchor["token_embeddings"].sum() * 0.0
        # cosine rescaled to [0, 1]; -inf stays -inf (no span)
        similarities = (logits[valid] + 1) / 2
        loss = nn.functional.cross_entropy(self.scale * similarities, targets[valid])
        if torch.isnan(loss):
            raise FloatingPointError(
                "SpanMaxCrossEntropyLoss is NaN: check the inputs and the learning rate."
            )
        return loss

    def _in_batch_logits(
        self, queries: Tensor, passages: list[dict[str, Any]], rows: int
    ) -> tuple[Tensor, Tensor]:
        """Every query against every passage row (column-major: positives, then each negative column). With
        ``gather_across_devices`` all processes' queries score this process's passages (token vectors stay where they
        are) and the scores are gathered with gradient."""
        from sentence_transformers.util import all_gather_with_grad

        rank, all_queries = 0, queries
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if self.gather_across_devices and distributed:
            all_queries, rank = all_gather_with_grad(queries), torch.distributed.get_rank()
        spans = (self.unit, self.min_span, self.max_span)
        scores = torch.cat(
            [column_span_scores(all_queries, out, *spans, shared=True) for out in passages]
        )
        local_passages = len(scores)  # (passage rows here, all queries)
        if all_queries is not queries:
            scores = all_gather_with_grad(scores)  # (passage rows of every process, all queries)
        # this process's queries against every passage row
        logits = scores[:, rank * rows : (rank + 1) * rows].T
        # own positive: column 0 rows
        targets = rank * local_passages + torch.arange(rows, device=logits.device)
        return logits, targets

    def _passage_outputs(self, columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Forward the passage columns, as one batch (column-major rows) when sentence-transformers can merge them."""
        if len(columns) > 1:
            merged = merge_feature_batches(columns)
            if merged is not None:
                return [self.model(merged)]
        return [self.model(column) for column in columns]
