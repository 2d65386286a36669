"""Span settings saved with a model: which spans it enumerates. They travel in the transformer's ``config.json``
under the key ``slice_st`` (kept by ``save_pretrained`` and Hub pushes): a SLICE checkpoint stays a plain pipeline."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from slice_st.errors import ModelLoadError
from slice_st.spans import check_span_bounds
from slice_st.tokens import check_unit

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = [
    "SpanConfig",
    "enable_span_features",
    "get_span_config",
    "has_span_features",
    "set_span_config",
]

CONFIG_KEY = "slice_st"


@dataclass(frozen=True)
class SpanConfig:
    """Which spans a model enumerates.

    Args:
        min_span: Shortest span, in units (≥ 1).
        max_span: Longest span, in units (≥ ``min_span``).
        unit: ``"word"`` or ``"token"``.

    Example:
        >>> SpanConfig(1, 20, "word").replace(max_span=10)
        SpanConfig(min_span=1, max_span=10, unit='word')
    """

    min_span: int = 1
    max_span: int = 20
    unit: str = "word"

    def __post_init__(self) -> None:
        check_span_bounds(self.min_span, self.max_span)
        check_unit(self.unit)

    def replace(self, **overrides: Any) -> SpanConfig:
        """A copy with the non-``None`` overrides applied (and validated)."""
        return SpanConfig(
            **asdict(self) | {key: value for key, value in overrides.items() if value is not None}
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def span_pooling_module(model: SentenceTransformer) -> Any:
    """The model's :class:`~slice_st.SpanPooling`, a module or attached to its ``Pooling`` (found by its marker)."""
    for module in model:
        for candidate in (module, getattr(module, "span_pooling", None)):
            if getattr(type(candidate), "provides_span_embeddings", False) is True:
                return candidate
    return None


def hf_config(model: SentenceTransformer) -> Any:
    """The Hugging Face config of the model's transformer module, if it has one."""
    configs = (getattr(getattr(module, "auto_model", None), "config", None) for module in model)
    return next((config for config in configs if config is not None), None)


def get_span_config(model: SentenceTransformer) -> SpanConfig:
    """The span settings saved with ``model`` (a ``SpanPooling`` module's win), else the defaults.

    Args:
        model: A ``SentenceTransformer``.

    Example:
        >>> get_span_config([])  # a model without settings gets the defaults
        SpanConfig(min_span=1, max_span=20, unit='word')
    """
    pooling = span_pooling_module(model)
    if pooling is not None:
        return SpanConfig(pooling.min_span, pooling.max_span, pooling.unit)
    saved = getattr(hf_config(model), CONFIG_KEY, None)
    if isinstance(saved, dict):
        return SpanConfig(
            **{key: saved[key] for key in ("min_span", "max_span", "unit") if key in saved}
        )
    return SpanConfig()


def set_span_config(
    model: SentenceTransformer,
    min_span: int | None = None,
    max_span: int | None = None,
    unit: str | None = None,
) -> SpanConfig:
    """Record span settings in the transformer's config (and a ``SpanPooling``) so ``model.save`` carries them.

    Args:
        model: A ``SentenceTransformer``.
        min_span: The new shortest span (``None``: keep the current one).
        max_span: The new longest span (``None``: keep the current one).
        unit: The new span unit, ``"word"`` or ``"token"`` (``None``: keep the current one).

    Returns:
        The new :class:`SpanConfig`.
    """
    span_config = get_span_config(model).replace(min_span=min_span, max_span=max_span, unit=unit)
    pooling = span_pooling_module(model)
    if pooling is not None:
        pooling.min_span, pooling.max_span = span_config.min_span, span_config.max_span
        pooling.unit = span_config.unit
    config = hf_config(model)
    if config is None and pooling is None:
        raise ValueError(
            "This model has no Hugging Face transformer module to record span settings in."
        )
    if config is not None:
        setattr(config, CONFIG_KEY, span_config.to_dict())
    return span_config


def enable_span_features(model: SentenceTransformer) -> SentenceTransformer:
    """Make the model's tokenizer always return the offsets and special-token masks span units need.

    The setting lives in the ``Transformer`` module's ``processing_kwargs`` (saved with the model), so it also
    reaches the training batches of sentence-transformers' data collator.

    Args:
        model: A ``SentenceTransformer`` whose first module is a ``Transformer``.

    Returns:
        ``model``.
    """
    from slice_st.tokens import SPAN_PROCESSING_KWARGS

    input_module = model[0]
    processing_kwargs = getattr(input_module, "processing_kwargs", None)
    if processing_kwargs is None:
        raise ValueError(
            "Span features need a sentence-transformers Transformer module (with processing_kwargs)."
        )
    text_kwargs = {**processing_kwargs.get("text", {}), **SPAN_PROCESSING_KWARGS["text"]}
    input_module.processing_kwargs = {**processing_kwargs, "text": text_kwargs}
    return model


def check_tokenizer(model: SentenceTransformer, name: str = "") -> None:
    """A ``ModelLoadError`` if the tokenizer is missing or far smaller than the embeddings (vocabulary files lost)."""
    tokenizer = getattr(model, "tokenizer", None)
    where = f" ({name})" if name else ""
    if tokenizer is None:
        raise ModelLoadError(f"The model{where} has no tokenizer.")
    vocab_size = getattr(hf_config(model), "vocab_size", None)
    size = len(tokenizer)
    if isinstance(vocab_size, int) and vocab_size > 0 and size * 2 < vocab_size:
        raise ModelLoadError(
            f"The model's tokenizer{where} has {size} tokens but the model has {vocab_size} token embeddings: "
            "its vocabulary files (tokenizer.json, vocab.txt, …) are missing or wrong."
        )


def has_span_features(model: SentenceTransformer) -> bool:
    """Whether every batch the model tokenizes (training batches too) carries the span features: offsets and
    special-token masks, as :func:`enable_span_features` asks.

    Args:
        model: A ``SentenceTransformer`` whose first module is a ``Transformer``.

    Returns:
        ``True`` once :func:`enable_span_features` has run on the model (or its saved settings carry them).
    """
    from slice_st.tokens import SPAN_PROCESSING_KWARGS

    text_kwargs = (getattr(model[0], "processing_kwargs", None) or {}).get("text", {})
    return all(
        text_kwargs.get(key) == value for key, value in SPAN_PROCESSING_KWARGS["text"].items()
    )
