"""The checks an adapter passes before ``make model`` ships it (``research.ship_adapter``): the package merges its own
adapter without them, its files pinned by their SHA-256 digests in ``provenance.json``."""

from __future__ import annotations

import json
import math
import os

from slice_st.pretrained import merge_lora_adapter

__all__ = ["merge_checked_adapter"]


def merge_checked_adapter(transformer, adapter_dir: str) -> int:
    """:func:`slice_st.pretrained.merge_lora_adapter` once every part of the adapter is checked to fit ``transformer``
    (a Hugging Face model); returns the number of layers changed.

    A ``ValueError`` for a corrupt or mismatched adapter (bad config, missing tensors, wrong shapes or rank, a
    ``lora_alpha`` not finite and > 0, NaN or infinite values) or one with options it does not apply (bias,
    ``modules_to_save``, DoRA, …), before any weight is changed.
    """
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
    unknown = sorted(
        key for key in tensors if not key.endswith((".lora_A.weight", ".lora_B.weight"))
    )
    if unknown:
        raise ValueError(
            f"{weights_path}: tensors this loader does not apply (only lora_A/lora_B weights can be merged): "
            f"{', '.join(unknown[:3])}{' …' if len(unknown) > 3 else ''}."
        )
    orphans = sorted(
        key for key in tensors if key.endswith(".lora_B.weight") and _pair(key) not in tensors
    )
    if orphans:
        raise ValueError(f"{weights_path}: {orphans[0]} has no lora_A tensor.")
    pairs = 0
    for key, lora_a in tensors.items():
        if key.endswith(".lora_A.weight"):
            module_path = key.removesuffix(".lora_A.weight").removeprefix("base_model.model.")
            try:
                weight = getattr(transformer.get_submodule(module_path), "weight", None)
            except AttributeError as error:
                raise ValueError(
                    f"{weights_path}: adapter targets {module_path!r}, which the base model lacks."
                ) from error
            _lora_delta(weights_path, module_path, weight, lora_a, tensors.get(_pair(key)), lora)
            pairs += 1
    if not pairs:
        raise ValueError(f"{weights_path}: no LoRA tensors found.")
    return merge_lora_adapter(transformer, adapter_dir)


def _pair(key: str) -> str:
    """The other tensor of a LoRA pair (``lora_A`` ↔ ``lora_B``)."""
    return (
        key.replace(".lora_A.", ".lora_B.")
        if ".lora_A." in key
        else key.replace(".lora_B.", ".lora_A.")
    )


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
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float))
        or not math.isfinite(alpha)
        or alpha <= 0
    ):
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


def _lora_delta(
    weights_path: str, module_path: str, weight, lora_a, lora_b, lora: tuple[str, int, float, float]
):
    """``scale · B A`` for ``weight``, once the pair is checked to fit it (and the product to be finite)."""
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
        raise ValueError(
            f"{weights_path}: the update for {module_path!r} overflows (r={rank}, lora_alpha={alpha!r})."
        )
    return delta


#: ``adapter_config.json`` options this loader does not apply: a true/non-empty value is refused, never ignored.
_UNAPPLIED_LORA_OPTIONS = tuple(
    "use_dora fan_in_fan_out modules_to_save rank_pattern alpha_pattern lora_bias layers_to_transform "
    "layer_replication trainable_token_indices target_parameters use_qalora use_bdlora alora_invocation_tokens "
    "arrow_config".split()
)
