"""``SpanMaxCoSENTLoss``: rank (origin phrase, passage) pairs by their best span's cosine, as graded similarity."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from slice_st.config import enable_span_features, get_span_config
from slice_st.losses.span_max_cross_entropy import column_span_scores, query_vectors

__all__ = ["SpanMaxCoSENTLoss"]

logger = logging.getLogger(__name__)

COSENT_CITATION = """
@online{kexuefm-8847,
    title={CoSENT: A more efficient sentence vector scheme than Sentence-BERT},
    author={Su Jianlin},
    year={2022},
    month={Jan},
    url={https://kexue.fm/archives/8847},
}
"""


class SpanMaxCoSENTLoss(nn.Module):
    """CoSENT on the max-over-spans score: the quantity STS-B-Context (and phrase mining) thresholds.

    For each row (origin phrase ``q``, passage ``p``, gold similarity ``y``), the score is
    ``s = max over spans x of p (min_span..max_span units) of cos(avg W(q), avg W(x))``, computed by the
    span core's fused scoring (only the arg-max span gets gradient). With ``λ = scale``, the loss is
    sentence-transformers' CoSENT on those scores::

        L = log(1 + Σ_{y_i > y_j} exp(λ (s_j − s_i)))

    so the pair order of the best-span cosines follows the gold order. Rows whose passage has no
    span (empty, or shorter than ``min_span``) are skipped and counted in ``skipped_rows``; ``weight``
    scales the loss (for mixing with other objectives in one run).

    Inputs: columns (origin phrase, passage) and a float label per row (any monotone scale, e.g. 0–1).

    >>> import torch
    >>> from slice_st import SpanMaxCoSENTLoss, load_model
    >>> model = load_model()
    >>> loss = SpanMaxCoSENTLoss(model, max_span=6)
    >>> columns = [["a man plays the guitar", "the market fell"], ["Last night a man played the guitar on stage.", "Last night a man played the guitar on stage."]]
    >>> value = loss([model.preprocess(column) for column in columns], torch.tensor([1.0, 0.0]))
    >>> bool(0 <= value.item() < 0.7)      # the guitar phrase already scores higher: a small loss
    True
    """

    def __init__(self, model, scale: float = 20.0, min_span: int = 1, max_span: int = 20, unit: str | None = None,
                 weight: float = 1.0) -> None:
        super().__init__()
        if scale <= 0:
            raise ValueError(f"scale must be > 0, got {scale}.")
        if weight < 0:
            raise ValueError(f"weight must be >= 0, got {weight}.")
        self.model = model
        self.scale, self.weight = scale, weight
        span_config = get_span_config(model).replace(min_span=min_span, max_span=max_span, unit=unit)
        self.min_span, self.max_span, self.unit = span_config.min_span, span_config.max_span, span_config.unit
        self.skipped_rows = 0
        enable_span_features(model)

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        columns = list(sentence_features)
        if len(columns) != 2:
            raise ValueError(f"SpanMaxCoSENTLoss needs columns (origin phrase, passage) and a score label; got {len(columns)} column(s).")
        if labels is None or labels.dim() != 1 or len(labels) != len(columns[0]["input_ids"]):
            raise ValueError("SpanMaxCoSENTLoss needs one float score label per row.")
        if self.unit == "word" and any("offset_mapping" not in column for column in columns):
            raise ValueError("Word units need offsets: the batch was tokenized without slice_st.enable_span_features(model).")
        queries, has_query = query_vectors(self.model(columns[0]), self.unit)
        passage = self.model(columns[1])
        scores = column_span_scores(queries, passage, self.unit, self.min_span, self.max_span)
        valid = has_query & torch.isfinite(scores)
        if not bool(valid.all()):
            skipped = int((~valid).sum())
            self.skipped_rows += skipped
            logger.warning("SpanMaxCoSENTLoss skipped %d row(s) with an empty phrase or a passage without spans.", skipped)
        scores, labels = scores[valid], labels[valid].to(scores.device, scores.dtype)
        if len(scores) < 2:
            return passage["token_embeddings"].sum() * 0.0
        differences = self.scale * (scores[None, :] - scores[:, None])  # [i, j] = λ (s_j − s_i)
        ordered = labels[:, None] > labels[None, :]  # pairs where row i should score above row j
        differences = torch.cat([differences.new_zeros(1), differences[ordered]])
        loss = self.weight * torch.logsumexp(differences, dim=0)
        if torch.isnan(loss):
            raise FloatingPointError("SpanMaxCoSENTLoss is NaN: check the inputs and the learning rate.")
        return loss

    def get_config_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "min_span": self.min_span, "max_span": self.max_span, "unit": self.unit, "weight": self.weight}

    @property
    def citation(self) -> str:
        return COSENT_CITATION
