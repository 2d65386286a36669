"""A SLICE model as a sentence-transformers ``MultiVectorEncoder`` (late interaction, ColBERT style): its token vectors
scored by MaxSim, for retrieval (docs/guides/multi-vector.md). The other way round needs nothing here: span encoding,
:func:`slice_st.best_spans` and :class:`slice_st.SpanIndex` take a ``MultiVectorEncoder`` as they take a
``SentenceTransformer`` (:mod:`slice_st.encode` holds the rule)."""

from __future__ import annotations

import copy
import json
import os
from typing import TYPE_CHECKING, Any

from slice_st.errors import SpanInputError

if TYPE_CHECKING:
    from sentence_transformers import MultiVectorEncoder, SentenceTransformer

__all__ = ["to_multi_vector"]


def to_multi_vector(
    model: SentenceTransformer | str | None = None,
    *,
    skiplist_words: list[str] | None = None,
    similarity_fn_name: str = "maxsim",
    **load_options: Any,
) -> MultiVectorEncoder:
    """A ``MultiVectorEncoder`` with the token vectors of a SLICE model: its transformer (copied), then a
    ``MultiVectorMask`` and a token-level ``Normalize``; no projection, so a token vector is the model's own
    (a one-token span's vector), unit-normalised. Save it with ``save`` and load it with ``MultiVectorEncoder(path)``.

    Loading a SLICE folder with ``MultiVectorEncoder(path)`` directly gives another model: sentence-transformers'
    conversion of a ``SentenceTransformer`` appends a randomly initialised 128-dimension projection.

    Args:
        model: A ``SentenceTransformer`` (e.g. from :func:`slice_st.load_model`), or a name or folder for
            :func:`slice_st.load_model` (``None``: the shipped ``slice-minilm``).
        skiplist_words: Document tokens left out of scoring (``list(string.punctuation)``: ColBERT's); default none.
        similarity_fn_name: ``"maxsim"`` or ``"meanmaxsim"``.
        **load_options: :func:`slice_st.load_model`'s, when ``model`` is a name or folder.

    Returns:
        The ``MultiVectorEncoder``, on the model's device, with its prompts.

    Example:
        >>> from slice_st.multi_vector import to_multi_vector
        >>> colbert = to_multi_vector()  # the shipped slice-minilm, scored by MaxSim
        >>> queries = colbert.encode_query(["Who played the guitar?"])
        >>> documents = colbert.encode_document(["A man played the guitar on stage.", "The flight was late."])
        >>> scores = colbert.similarity(queries, documents)
        >>> documents[0].shape[1], bool(scores[0, 0] > scores[0, 1])
        (384, True)
    """
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    if model is None or isinstance(model, str):
        from slice_st.loading import load_model

        model = load_model(model, **load_options)
    elif load_options:
        raise SpanInputError(
            f"Options {sorted(load_options)} load a model: give a name or folder, not a model."
        )
    if getattr(model, "model_type", None) == "MultiVectorEncoder":
        raise SpanInputError("The model is a MultiVectorEncoder already.")
    transformer = next(iter(model), None) if hasattr(model, "__iter__") else None
    if not isinstance(transformer, Transformer):
        raise SpanInputError(
            "to_multi_vector needs a sentence-transformers model whose first module is a Transformer."
        )
    return MultiVectorEncoder(
        modules=[
            copy.deepcopy(transformer),
            MultiVectorMask(skiplist_words=skiplist_words),
            Normalize(module_input_name="token_embeddings"),
        ],
        device=str(model.device),
        prompts=dict(getattr(model, "prompts", None) or {}),
        default_prompt_name=getattr(model, "default_prompt_name", None),
        similarity_fn_name=similarity_fn_name,
    )


def is_multi_vector_folder(path: str | os.PathLike) -> bool:
    """Whether a local model folder holds a ``MultiVectorEncoder`` checkpoint: sentence-transformers' or PyLate's
    (``model_type`` ``"MultiVectorEncoder"`` / ``"ColBERT"``) or a Stanford-NLP ColBERT (``HF_ColBERT``), which
    ``SentenceTransformer`` would load as another model."""
    settings = _json(os.path.join(path, "config_sentence_transformers.json")).get("model_type")
    architectures = _json(os.path.join(path, "config.json")).get("architectures") or []
    return settings in ("MultiVectorEncoder", "ColBERT") or "HF_ColBERT" in architectures


def load_multi_vector_folder(path: Any, **options: Any) -> MultiVectorEncoder | None:
    """The ``MultiVectorEncoder`` of a checkpoint folder (:func:`is_multi_vector_folder`), on ``options["device"]``;
    ``None`` for anything else (a model object, a Hub id, another folder). Other options given (not ``None``): a
    :class:`SpanInputError`, as they apply to models :func:`slice_st.load_model` loads."""
    if (
        not isinstance(path, (str, os.PathLike))
        or not os.path.isdir(path)
        or not is_multi_vector_folder(path)
    ):
        return None
    from sentence_transformers import MultiVectorEncoder

    device = options.pop("device", None)
    others = sorted(key for key, value in options.items() if value is not None)
    if others:
        raise SpanInputError(
            f"{path} is a MultiVectorEncoder checkpoint: options {others} do not apply to it."
        )
    return MultiVectorEncoder(os.fspath(path), device=device)


def _json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
