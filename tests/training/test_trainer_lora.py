"""The installed transformers / peft pair can train a LoRA adapter (what --lora-r and make model do), and a pair
that cannot is one clear error. This is the test that goes red when a new transformers release asks for a peft
that the ranges in pyproject.toml still allow below it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")


def _one_step(model) -> None:
    features = model.tokenize(["a man plays the guitar", "the flight was delayed"])
    out = model(features)["token_embeddings"]
    # not out.sum(): after the last LayerNorm every token's dimensions sum to a constant, so that loss has a gradient
    # of float noise (~1e-10), and whether Adam moves the adapter then depends on the random state earlier tests leave
    loss = out[..., 0].sum()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(
        trainable, lr=1e-2
    )  # Adam: a step of about lr whatever the gradient's scale
    loss.backward()
    optimizer.step()


def test_the_installed_pair_trains_and_merges_a_lora_adapter(make_tiny_model, tmp_path):
    from slice_st.loading import has_adapters, merged_adapters
    from slice_st.training.trainer import _add_lora, save_adapter

    model = make_tiny_model()
    before = model.encode(["a man plays the guitar"], convert_to_tensor=True)
    torch.manual_seed(0)  # the adapter's initial weights
    _add_lora(model, rank=4, alpha=None)
    assert has_adapters(model)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)  # the base weights stay frozen
    model.train()
    _one_step(model)
    model.eval()
    after = model.encode(["a man plays the guitar"], convert_to_tensor=True)
    assert (after - before).abs().max() > 1e-4  # the adapter trained
    saved = save_adapter(model, str(tmp_path / "adapter"))
    assert saved
    merged = merged_adapters(model)
    assert not has_adapters(merged)
    assert torch.allclose(
        merged.encode(["a man plays the guitar"], convert_to_tensor=True), after, atol=1e-5
    )


def test_a_pair_that_cannot_train_is_one_clear_error(make_tiny_model, monkeypatch):
    """A transformers release that asks for a newer peft than the one installed (as 5.24 did with peft 0.21)."""
    import transformers.integrations.peft as hf_peft

    from slice_st.errors import MissingExtraError
    from slice_st.training.trainer import _add_lora

    monkeypatch.setattr(hf_peft, "MIN_PEFT_VERSION", "999.0")
    with pytest.raises(
        MissingExtraError, match=r"LoRA training \(--lora-r\) cannot run on transformers .* peft"
    ):
        _add_lora(make_tiny_model(), rank=4, alpha=None)
