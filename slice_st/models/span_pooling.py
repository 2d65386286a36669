"""``SpanPooling``: every span's mean vector beside a model's mean pooling, with only plain modules saved."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from sentence_transformers.base.modules import Module

from slice_st.config import get_span_config, set_span_config
from slice_st.spans import check_span_bounds, pool_spans
from slice_st.tokens import check_unit, unit_boundaries

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


class SpanPooling(Module):
    """Span vectors from a model's mean pooling: every span's mean token vector, beside the sentence embedding.

    :meth:`attach` hangs it on a model's mean ``Pooling`` module, so the model still saves and loads as plain
    sentence-transformers modules (no ``trust_remote_code``); attach it again after loading where spans are needed
    inside the forward pass. On a batch tokenized with the span features (``SPAN_PROCESSING_KWARGS`` per call, or
    :func:`slice_st.config.enable_span_features`) it adds to the features:

    * ``span_embeddings`` ``(B, S, d)``: mean token vector of every span of ``min_span..max_span`` units,
    * ``span_units`` ``(B, S, 2)``: (start, end) unit of each span (the same grid in every row),
    * ``span_mask`` ``(B, S)``: which spans exist in each row,
    * ``span_offsets`` ``(B, S, 2)``: character offsets of each span,
    * ``unit_boundaries`` ``(B, U + 1)`` and ``num_units`` ``(B,)`` (see :mod:`slice_st.spans`).

    Other batches get plain mean pooling (a training batch without the features is an error). As a module of its own
    it also computes ``sentence_embedding``; :func:`slice_st.load_model` loads such a pipeline without a trust flag.

    Args:
        embedding_dimension: Dimension of the token vectors.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"``.
        output_spans: Add the span outputs (else it is plain mean pooling).

    Example:
        >>> from slice_st import SpanPooling, load_model
        >>> from slice_st.tokens import SPAN_PROCESSING_KWARGS
        >>> model = SpanPooling.attach(load_model(), max_span=3)
        >>> type(model[1]).__name__  # still sentence-transformers' own module
        'Pooling'
        >>> out = model.encode(["A man plays the guitar."], output_value=None, processing_kwargs=SPAN_PROCESSING_KWARGS)
        >>> out[0]["span_embeddings"][out[0]["span_mask"]].shape
        torch.Size([12, 384])
        >>> sorted(model.encode(["A man plays the guitar."], output_value=None)[0])
        ['attention_mask', 'input_ids', 'modality', 'sentence_embedding', 'token_embeddings', 'token_type_ids']
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
        self.min_span, self.max_span = min_span, max_span
        self.unit, self.output_spans = check_unit(unit), output_spans

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        token_embeddings = features["token_embeddings"]
        weights = features["attention_mask"].unsqueeze(-1).to(token_embeddings.dtype)
        counts = weights.sum(1).clamp(min=1e-9)
        features["sentence_embedding"] = (token_embeddings * weights).sum(1) / counts
        return self.add_spans(features)

    def add_spans(self, features: dict[str, Any]) -> dict[str, Any]:
        """Add the span outputs to ``features`` (pooled already) if the batch carries the span features."""
        if not self.output_spans:
            return features
        special, offsets = features.get("special_tokens_mask"), features.get("offset_mapping")
        if special is None or (offsets is None and self.unit == "word"):
            if self.training:
                raise ValueError(
                    "SpanPooling: this training batch was tokenized without the span features; call "
                    "slice_st.config.enable_span_features(model) before training (slice-st train does)."
                )
            return features
        token_embeddings, attention_mask = features["token_embeddings"], features["attention_mask"]
        units = unit_boundaries(attention_mask, special, offsets, self.unit)
        spans = pool_spans(
            token_embeddings, units.boundaries, units.num_units, self.min_span, self.max_span
        )
        last = (spans.ends - 1).clamp(min=0)
        grid = torch.stack([spans.starts, spans.ends], dim=1)
        characters = [units.char_starts[:, spans.starts], units.char_ends[:, last]]
        features.update(
            span_embeddings=spans.embeddings.to(token_embeddings.dtype),
            span_units=grid.expand(len(token_embeddings), -1, -1),
            span_mask=spans.mask,
            span_offsets=torch.stack(characters, dim=-1),
            unit_boundaries=units.boundaries,
            num_units=units.num_units,
        )
        return features

    def _after_pooling(self, module, args, output):  # the forward hook on the attached Pooling
        return self.add_spans(output)

    def get_embedding_dimension(self) -> int:
        return self.embedding_dimension

    def save(
        self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any
    ) -> None:
        self.save_config(output_path)

    @classmethod
    def attach(
        cls,
        model: SentenceTransformer,
        min_span: int | None = None,
        max_span: int | None = None,
        unit: str | None = None,
        output_spans: bool = True,
    ) -> SentenceTransformer:
        """Give the model's mean ``Pooling`` module span outputs, in place (a child and a forward hook, which ``save()``
        does not write; the settings, default those saved with the model, go to its config); returns the model."""
        from sentence_transformers.sentence_transformer.modules import Pooling

        settings = get_span_config(model).replace(min_span=min_span, max_span=max_span, unit=unit)
        pooling = next((module for module in model if isinstance(module, Pooling)), None)
        if pooling is None:
            raise ValueError("SpanPooling.attach needs a model with a mean Pooling module.")
        if pooling.pooling_mode != "mean":
            raise ValueError(
                f"SpanPooling extends mean pooling only; this model pools with {pooling.pooling_mode!r}."
            )
        old = getattr(pooling, "span_pooling", None)
        if isinstance(old, cls):
            old._hook.remove()
        spans = (settings.min_span, settings.max_span, settings.unit)
        span_pooling = cls(pooling.get_embedding_dimension(), *spans, output_spans)
        # a child: found by get_span_config, moved by .to(), never saved
        pooling.span_pooling = span_pooling
        span_pooling._hook = pooling.register_forward_hook(span_pooling._after_pooling)
        set_span_config(model, *spans)
        return model
