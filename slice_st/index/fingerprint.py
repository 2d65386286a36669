"""Which model an index (or a calibration) was built with: a weights fingerprint, a readable name and path."""

from __future__ import annotations

import hashlib
import os
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from slice_st.config import DEFAULT_MODEL_NAME, default_model_path
from slice_st.encode import SpanInputError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["model_fingerprint", "model_identity", "model_source"]


def model_fingerprint(model: SentenceTransformer) -> str:
    """A short hash of the model's weights and tokenizer, to refuse indexes built with another model.

    Every parameter contributes (its shape and a strided sample of its values), so models that differ
    only inside the encoder (e.g. a merged LoRA adapter) get different fingerprints.
    """
    digest = hashlib.sha256()
    tokenizer = model.tokenizer
    digest.update(f"{type(tokenizer).__name__}:{len(tokenizer) if tokenizer is not None else 0}".encode())
    for parameter in model.parameters():
        values = parameter.detach().flatten()
        values = values[:: max(1, values.numel() // 4096)][:4096].float().cpu().numpy()
        digest.update(str(tuple(parameter.shape)).encode())
        digest.update(np.round(values, 5).tobytes())
    return digest.hexdigest()[:16]


def model_identity(model: SentenceTransformer) -> tuple[str, str]:
    """``(name, path)`` of a model: a readable name, and the local directory it was loaded from (``""`` if none).

    A Hub model is named by its id; a local one by its directory's name (with the parent's for
    generic names such as ``final`` or ``checkpoint-500``); the embedded base by its Hub id, and a
    model shipped in the package by its shipped name.

    >>> from slice_st import load_model
    >>> model_identity(load_model("base")), model_identity(load_model())
    (('sentence-transformers/all-MiniLM-L6-v2', ''), ('slice-minilm', ''))
    """
    card = getattr(model, "model_card_data", None)
    hub_id = getattr(card, "model_id", None) or getattr(card, "base_model", None) or ""
    source = ""
    try:
        for module in model:
            config = getattr(getattr(module, "auto_model", None), "config", None)
            if config is not None:
                source = str(getattr(config, "name_or_path", "") or "")
                break
    except TypeError:  # not a module list
        pass
    if not source or not os.path.isdir(source):
        return (hub_id or source), ""
    path = os.path.abspath(source)
    if re.fullmatch(r"\d+_\w+", os.path.basename(path)):  # the transformer inside an ST folder (0_Transformer)
        path = os.path.dirname(path)
    try:
        if os.path.samefile(path, default_model_path()):  # the embedded base, or a shipped model built on it
            return hub_id or DEFAULT_MODEL_NAME, ""
    except OSError:
        pass
    name = os.path.basename(path)
    if re.fullmatch(r"(model|final|best|last|output|checkpoint(-\d+)?)", name, flags=re.IGNORECASE):
        name = f"{os.path.basename(os.path.dirname(path))}/{name}"
    return hub_id or name, path


def model_source(index_path: str, manifest: dict[str, Any]) -> str | None:
    """What to load when an index is opened without a model: its recorded local path, else its name (None: the default)."""
    model_path = manifest.get("model_path") or ""
    if model_path:
        if os.path.isdir(model_path):
            return model_path
        raise SpanInputError(
            f"{index_path} was built with the model at {model_path!r} ({manifest.get('model_name') or 'unnamed'}), "
            "which is not there any more: pass the model (model=..., --model)."
        )
    return manifest.get("model_name") or None
