"""The model shipped in the package (``slice-minilm``): size, provenance, merge, default, clear errors."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from helpers import cli_fails

import slice_st
from slice_st.pretrained import SHIPPED_MODELS, is_shipped_model_name, merge_lora_adapter, shipped_model

SHIPPED = shipped_model("slice-minilm")


def test_adapter_is_small_and_documented():
    total = sum(os.path.getsize(os.path.join(SHIPPED.adapter_dir, name)) for name in os.listdir(SHIPPED.adapter_dir))
    assert total <= 4 * 1024 * 1024
    provenance = SHIPPED.provenance
    for key in ("base_model", "recipe", "command", "training_data", "licence", "commit", "dev_metrics"):
        assert provenance.get(key), key
    with open(os.path.join(SHIPPED.adapter_dir, "adapter_config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    assert config["peft_type"] == "LORA" and not config["base_model_name_or_path"].startswith("/")  # no local paths


def test_names():
    assert set(SHIPPED_MODELS) == {"slice-minilm"}
    assert is_shipped_model_name("slice-minilm") and is_shipped_model_name("slice-st/slice-minilm")
    assert not is_shipped_model_name("base") and not is_shipped_model_name(None)
    with pytest.raises(KeyError, match="shipped"):
        shipped_model("nope")


@pytest.fixture(scope="module")
def shipped_and_base():
    return slice_st.load_model(), slice_st.load_model("base")


def test_default_is_the_shipped_model(shipped_and_base):
    shipped, base = shipped_and_base
    assert shipped.model_card_data.shipped_name == "slice-minilm"  # its name, not a Hub id the card would print
    assert shipped.model_card_data.model_id is None and base.model_card_data.model_id is None
    changed = [
        name for (name, a), (_, b) in zip(shipped.named_parameters(), base.named_parameters()) if not torch.equal(a, b)
    ]
    assert len(changed) == 36 and all(".encoder." in name for name in changed)  # 6 linear layers in each of 6 blocks


def test_merge_equals_peft(shipped_and_base):
    peft = pytest.importorskip("peft")  # noqa: F841 - peft is a training extra; the merge itself needs only torch
    shipped, _ = shipped_and_base
    reference = slice_st.load_model("base")
    reference.load_adapter(SHIPPED.adapter_dir)
    texts = ["A man is playing the guitar on stage.", "The flight to Denver was delayed by three hours."]
    merged = shipped.encode_spans(texts, max_span=4)
    adapted = reference.encode_spans(texts, max_span=4)
    for a, b in zip(merged, adapted):
        assert a.spans == b.spans
        assert abs(a.embeddings - b.embeddings).max() < 1e-4


def test_reopens_by_name_and_index_identity(shipped_and_base):
    from slice_st.loading import model_fingerprint, model_identity

    shipped, base = shipped_and_base
    assert model_identity(shipped) == ("slice-minilm", "")
    again = slice_st.load_model("slice-st/slice-minilm")
    assert model_fingerprint(again) == model_fingerprint(shipped) != model_fingerprint(base)


def test_save_slice_model_is_flag_free(shipped_and_base, tmp_path):
    from sentence_transformers import SentenceTransformer

    shipped, _ = shipped_and_base
    path = slice_st.save_slice_model(shipped, str(tmp_path / "slice-minilm"))
    loaded = SentenceTransformer(path)
    text = ["Customer: my bag was lost on the way to Denver."]
    assert abs(loaded.encode(text) - shipped.encode(text)).max() < 1e-5


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
    model = BertModel.from_pretrained(slice_st.loading.default_model_path())
    before = {name: value.clone() for name, value in model.state_dict().items()}
    with pytest.raises((ValueError, FileNotFoundError)):
        merge_lora_adapter(model, str(folder))
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())  # nothing half-merged


def test_pinned_behaviour_of_the_shipped_adapter(shipped_and_base):
    """A bad or stale adapter file cannot ship silently: known best spans and scores (to 1e-3) of this adapter."""
    shipped, base = shipped_and_base
    texts = [
        "Customer: My son plays the guitar and wants to bring it on board as hand luggage.",
        "Agent: I'm sorry about that, the departure got delayed because of the storm in Chicago.",
    ]
    result = shipped.best_spans(["a man plays the guitar", "the flight was delayed"], texts, top_k=1, scorer="phrase")
    assert (result[0][0][0].span, result[1][1][0].span) == ("plays the guitar", "the departure got delayed")
    assert result[0][0][0].similarity == pytest.approx(0.8060, abs=1e-3)
    assert result[1][1][0].similarity == pytest.approx(0.7076, abs=1e-3)
    assert result[0][0][0].score == pytest.approx(0.7549, abs=1e-3)  # the "phrase" scorer: shorter than the query
    plain = base.best_spans(["the flight was delayed"], texts[1:], top_k=1, scorer="max-cosine")[0][0][0]
    assert (plain.span, round(plain.score, 3)) == (
        "that, the departure got delayed",
        0.660,
    )  # the base model, for contrast


def _tiny_adapter(folder, config_changes=None, tensors_changes=None, rank=4):
    """A LoRA adapter for the tiny BERT (d=32): the query and value layers of layer 0, ``rank`` r."""
    import torch
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
        (None, {"base_model.model.encoder.layer.0.attention.self.query.lora_A.weight": "nan"}, "NaN or infinite"),
        (
            None,
            {"base_model.model.encoder.layer.0.attention.self.query.bias": "zeros"},
            "tensors this loader does not apply",
        ),
        (None, {"base_model.model.pooler.dense.lora_B.weight": "zeros"}, "has no lora_A tensor"),
    ],
)
def test_adapter_loader_refuses_what_it_cannot_apply(tiny_model_dir, tmp_path, config, tensors, expected):
    import torch
    from transformers import BertModel

    from slice_st.pretrained import merge_lora_adapter

    made = {}
    for key, kind in (tensors or {}).items():
        shape = (4, 32) if kind == "nan" else (32, 4) if "lora_B" in key else (32,)
        made[key] = torch.full(shape, float("nan")) if kind == "nan" else torch.zeros(shape)
    folder = _tiny_adapter(tmp_path / "adapter", config, made)
    base = BertModel.from_pretrained(tiny_model_dir)
    before = {name: value.clone() for name, value in base.state_dict().items()}
    with pytest.raises(ValueError, match=expected):
        merge_lora_adapter(base, folder)
    assert all(torch.equal(before[name], value) for name, value in base.state_dict().items())  # nothing merged
    assert merge_lora_adapter(base, _tiny_adapter(tmp_path / "good")) == 2  # a plain adapter still merges


def test_shipped_adapter_with_a_wrong_rank_is_a_model_load_error(tmp_path, monkeypatch, capsys):
    import shutil

    import slice_st
    from slice_st.pretrained import SHIPPED_MODELS, ShippedModel

    shipped = SHIPPED_MODELS["slice-minilm"]
    folder = tmp_path / "slice_minilm"
    shutil.copytree(shipped.adapter_dir, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps(config | {"r": 8}))  # tensors are rank 16: scale 4, not 2
    monkeypatch.setitem(SHIPPED_MODELS, "slice-minilm", ShippedModel("slice-minilm", str(folder), shipped.description))
    with pytest.raises(slice_st.ModelLoadError, match="cannot load the shipped model slice-minilm: .* says r=8"):
        slice_st.load_model()
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    assert "says r=8" in cli_fails(capsys, "mine", "-q", "dog", corpus, "--no-progress")
