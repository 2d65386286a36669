"""Which model an index was built with, and where to load it from (the fingerprint and name are ``loading``'s)."""

from __future__ import annotations

import os
from typing import Any

from slice_st.backends import backend_of, runner_of
from slice_st.errors import SpanInputError
from slice_st.loading import model_identity
from slice_st.pretrained import is_shipped_model_name


def model_runtime(model) -> dict[str, str]:
    """``{"backend": ..., "model_file": ...}`` for a model on ONNX Runtime / OpenVINO (file relative to
    the model folder when inside it), ``{}`` on torch: what :func:`slice_st.load_model` needs to load it again."""
    runner = runner_of(model)
    if runner is None:
        return {}
    _, folder = model_identity(model)
    path = os.path.abspath(runner.path)
    if folder and os.path.commonpath([path, os.path.abspath(folder)]) == os.path.abspath(folder):
        path = os.path.relpath(path, folder)
    return {"backend": backend_of(model), "model_file": path}


def model_source(index_path: str, manifest: dict[str, Any]) -> str | None:
    """What to load when an index is opened without a model: its recorded local path, else its name (None: the
    default model)."""
    model_path = manifest.get("model_path") or ""
    if model_path:
        if os.path.isdir(model_path):
            return model_path
        raise SpanInputError(
            f"{index_path} was built with the model at {model_path!r} ({manifest.get('model_name') or 'unnamed'}), "
            "which is not there any more: pass the model (model=..., --model)."
        )
    name = manifest.get("model_name") or None
    if name is not None and is_shipped_model_name(f"slice-st/{name}"):  # never a ./slice-minilm folder here
        return f"slice-st/{name}"
    return name
