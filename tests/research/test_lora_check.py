"""The checks a LoRA adapter passes before it is shipped (``research.lora_check``): a damaged or unsupported
adapter is refused whole, nothing half-merged."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from research.lora_check import merge_checked_adapter
from slice_st.loading import default_model_path
from slice_st.pretrained import shipped_model

SHIPPED = shipped_model("slice-minilm")


@pytest.mark.parametrize("damage", ["missing", "truncated", "bad_config", "wrong_shape", "dora"])
def test_damaged_adapter_is_refused_whole(tmp_path, damage):
    from transformers import BertModel

    folder = tmp_path / "adapter"
    shutil.copytree(SHIPPED.adapter_dir, folder)
    weights, config_path = folder / "adapter_model.safetensors", folder / "adapter_config.json"
    if damage == "missing":
        weights.unlink()
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif damage == "bad_config":
        config_path.write_text("{not json")
    elif damage == "dora":
        config = json.loads(config_path.read_text())
        config["use_dora"] = True
        config_path.write_text(json.dumps(config))
    else:
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(weights))
        key = next(k for k in tensors if k.endswith("lora_A.weight"))
        tensors[key] = torch.zeros(3, 5)
        save_file(tensors, str(weights))
    model = BertModel.from_pretrained(default_model_path())
    before = {name: value.clone() for name, value in model.state_dict().items()}
    with pytest.raises((ValueError, FileNotFoundError)):
        merge_checked_adapter(model, str(folder))
    assert all(
        torch.equal(before[name], value) for name, value in model.state_dict().items()
    )  # nothing half-merged


def _tiny_adapter(folder, config_changes=None, tensors_changes=None, rank=4):
    """A LoRA adapter for the tiny BERT (d=32): the query and value layers of layer 0, ``rank`` r."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 8,
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_dora": False,
        "use_rslora": False,
        "rank_pattern": {},
        "alpha_pattern": {},
        "lora_bias": False,
    }
    config.update(config_changes or {})
    (folder / "adapter_config.json").write_text(json.dumps(config))
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in ("query", "value"):
        key = f"base_model.model.encoder.layer.0.attention.self.{layer}"
        tensors[f"{key}.lora_A.weight"] = torch.randn(rank, 32, generator=generator) * 0.1
        tensors[f"{key}.lora_B.weight"] = torch.randn(32, rank, generator=generator) * 0.1
    tensors.update(tensors_changes or {})
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    return str(folder)


@pytest.mark.parametrize(
    "config, tensors, expected",
    [
        ({"r": 8}, None, "rank 4, but .* says r=8"),
        ({"r": 2}, None, "rank 4, but .* says r=2"),
        ({"r": 4.0}, None, "r must be a positive integer"),
        ({"lora_alpha": 0}, None, "lora_alpha must be a finite number > 0"),
        ({"lora_alpha": -16}, None, "lora_alpha must be a finite number > 0"),
        ({"lora_alpha": float("nan")}, None, "lora_alpha must be a finite number > 0"),
        ({"lora_alpha": float("inf")}, None, "lora_alpha must be a finite number > 0"),
        ({"lora_alpha": "16"}, None, "lora_alpha must be a finite number > 0"),
        ({"bias": "all"}, None, "bias='all' is not applied"),
        ({"modules_to_save": ["pooler"]}, None, "modules_to_save=\\['pooler'\\] not applied"),
        ({"fan_in_fan_out": True}, None, "fan_in_fan_out=True not applied"),
        ({"use_dora": True}, None, "use_dora=True not applied"),
        (
            None,
            {"base_model.model.encoder.layer.0.attention.self.query.lora_A.weight": "nan"},
            "NaN or infinite",
        ),
        (
            None,
            {"base_model.model.encoder.layer.0.attention.self.query.bias": "zeros"},
            "tensors this loader does not apply",
        ),
        (None, {"base_model.model.pooler.dense.lora_B.weight": "zeros"}, "has no lora_A tensor"),
    ],
)
def test_adapter_loader_refuses_what_it_cannot_apply(
    tiny_model_dir, tmp_path, config, tensors, expected
):
    from transformers import BertModel

    made = {}
    for key, kind in (tensors or {}).items():
        shape = (4, 32) if kind == "nan" else (32, 4) if "lora_B" in key else (32,)
        made[key] = torch.full(shape, float("nan")) if kind == "nan" else torch.zeros(shape)
    folder = _tiny_adapter(tmp_path / "adapter", config, made)
    base = BertModel.from_pretrained(tiny_model_dir)
    before = {name: value.clone() for name, value in base.state_dict().items()}
    with pytest.raises(ValueError, match=expected):
        merge_checked_adapter(base, folder)
    assert all(
        torch.equal(before[name], value) for name, value in base.state_dict().items()
    )  # nothing merged
    assert (
        merge_checked_adapter(base, _tiny_adapter(tmp_path / "good")) == 2
    )  # a plain adapter still merges
