"""``SpanPooling``: a sentence-transformers module that adds every span's mean vector to the features."""

from __future__ import annotations

from typing import Any

import torch
from sentence_transformers.base.modules import Module

from slice_st.config import enable_span_features, get_span_config
from slice_st.spans import check_span_bounds, pool_spans
from slice_st.tokens import check_unit, unit_boundaries


class SpanPooling(Module):
    """Mean pooling that also yields span vectors: a drop-in for ``Pooling(pooling_mode="mean")``.

    From ``token_embeddings`` and ``attention_mask`` it sets ``sentence_embedding`` (mean of all
    attended tokens, exactly like mean ``Pooling``). With ``output_spans=True`` it also adds, from the
    tokenizer's ``special_tokens_mask`` and ``offset_mapping``:

    * ``span_embeddings`` ``(B, S, d)``: mean token vector of every span of ``min_span..max_span`` units,
    * ``span_units`` ``(B, S, 2)``: (start, end) unit of each span (the same grid in every row),
    * ``span_mask`` ``(B, S)``: which spans exist in each row,
    * ``span_offsets`` ``(B, S, 2)``: character offsets of each span,
    * ``unit_boundaries`` ``(B, U + 1)`` and ``num_units`` ``(B,)`` (see :mod:`slice_st.spans`).

    The tokenizer only returns offsets when asked: :meth:`attach` puts this module in a model and
    asks the model's ``Transformer`` for them, in a way that is saved with the model.

    Saving a model with this module names ``slice_st.models.span_pooling.SpanPooling`` in ``modules.json``, so
    loading it needs ``trust_remote_code=True`` (and ``slice_st`` installed). To share a model that
    loads anywhere with no flag, save it with :func:`slice_st.save_slice_model`.

    Args:
        embedding_dimension: Dimension of the token vectors.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"``.
        output_spans: Also output the span vectors (else it is plain mean pooling).

    Example:
        >>> from slice_st import SpanPooling, load_model
        >>> model = SpanPooling.attach(load_model(), max_span=3)
        >>> out = model.encode(["A man plays the guitar."], output_value=None)[0]
        >>> out["span_embeddings"][out["span_mask"]].shape
        torch.Size([12, 384])
    """

    #: Read by :func:`slice_st.get_span_config` to find this module in a model without importing this class.
    provides_span_embeddings = True
    config_keys = ["embedding_dimension", "min_span", "max_span", "unit", "output_spans"]

    def __init__(
        self,
        embedding_dimension: int,
        min_span: int = 1,
        max_span: int = 20,
        unit: str = "word",
        output_spans: bool = True,
    ) -> None:
        super().__init__()
        check_span_bounds(min_span, max_span)
        self.embedding_dimension = embedding_dimension
        self.min_span = min_span
        self.max_span = max_span
        self.unit = check_unit(unit)
        self.output_spans = output_spans

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        token_embeddings = features["token_embeddings"]
        attention_mask = features["attention_mask"]
        weights = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)
        features["sentence_embedding"] = (token_embeddings * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        if not self.output_spans:
            return features
        units = unit_boundaries(
            attention_mask, features.get("special_tokens_mask"), features.get("offset_mapping"), self.unit
        )
        spans = pool_spans(token_embeddings, units.boundaries, units.num_units, self.min_span, self.max_span)
        last = (spans.ends - 1).clamp(min=0)
        features.update(
            span_embeddings=spans.embeddings.to(token_embeddings.dtype),
            span_units=torch.stack([spans.starts, spans.ends], dim=1).expand(len(token_embeddings), -1, -1),
            span_mask=spans.mask,
            span_offsets=torch.stack([units.char_starts[:, spans.starts], units.char_ends[:, last]], dim=-1),
            unit_boundaries=units.boundaries,
            num_units=units.num_units,
        )
        return features

    def get_embedding_dimension(self) -> int:
        return self.embedding_dimension

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)

    @classmethod
    def attach(
        cls,
        model,
        min_span: int | None = None,
        max_span: int | None = None,
        unit: str | None = None,
        output_spans: bool = True,
    ):
        """Replace the model's mean ``Pooling`` by ``SpanPooling`` (in place) and return the model.

        Span settings default to those saved with the model. The model's input module is set to
        return offsets and special-token masks (saved with the model), which word units need.
        """
        from sentence_transformers.sentence_transformer.modules import Pooling

        settings = get_span_config(model).replace(min_span=min_span, max_span=max_span, unit=unit)
        positions = [index for index, module in enumerate(model) if isinstance(module, (Pooling, cls))]
        if not positions:
            raise ValueError("SpanPooling.attach needs a model with a mean Pooling module to replace.")
        old = model[positions[0]]
        if isinstance(old, Pooling) and old.pooling_mode != "mean":
            raise ValueError(f"SpanPooling replaces mean pooling only; this model pools with {old.pooling_mode!r}.")
        model[positions[0]] = cls(
            old.get_embedding_dimension(), settings.min_span, settings.max_span, settings.unit, output_spans
        )
        enable_span_features(model)
        return model
