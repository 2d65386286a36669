"""What the SLICE losses share: the sentence-transformers loss protocol (config dict, citation) and unit boundaries."""

from __future__ import annotations

from typing import Any

from torch import nn

from slice_st.card import SLICE_CITATION
from slice_st.config import has_span_features
from slice_st.errors import SpanInputError
from slice_st.tokens import unit_boundaries


class SliceLoss(nn.Module):
    """A SLICE loss: ``get_config_dict`` lists the attributes named in ``config_keys``; ``citation`` is the paper's."""

    config_keys: tuple[str, ...] = ()

    def get_config_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.config_keys}

    @property
    def citation(self) -> str:
        return SLICE_CITATION


def batch_units(features: dict[str, Any], unit: str):
    """The unit boundaries (:func:`slice_st.tokens.unit_boundaries`) of a tokenized batch or a forward pass."""
    return unit_boundaries(
        features["attention_mask"],
        features.get("special_tokens_mask"),
        features.get("offset_mapping"),
        unit,
    )


def check_offsets(columns: list[dict[str, Any]], unit: str) -> None:
    """Word units need the tokenizer's offsets, which :func:`slice_st.config.enable_span_features` asks for."""
    if unit == "word" and any("offset_mapping" not in column for column in columns):
        raise ValueError(
            "Word units need offsets: tokenize after slice_st.config.enable_span_features(model)."
        )


def require_span_features(model, loss: str) -> None:
    """A clear error unless ``model`` tokenizes every batch with the span features (a loss never changes the model)."""
    if not has_span_features(model):
        raise SpanInputError(
            f"{loss} needs every training batch tokenized with offsets and special-token masks: call "
            "slice_st.config.enable_span_features(model) before building the loss (slice-st train does)."
        )
