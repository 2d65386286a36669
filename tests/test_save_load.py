"""Span settings travel with saved models; SpanPooling pipelines; plain SentenceTransformer(path) loading."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling

import slice_st
from slice_st import SpanPooling, get_span_config, save_slice_model, set_span_config
from slice_st.config import SpanConfig

TEXTS = ["A man plays the guitar on stage.", "Don't stop — café au lait!", "x"]


def module_types(path: str) -> list[str]:
    with open(os.path.join(path, "modules.json")) as handle:
        return [entry["type"] for entry in json.load(handle)]


def assert_same_encodings(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.offsets, y.offsets)
        np.testing.assert_array_equal(x.units, y.units)
        np.testing.assert_allclose(x.embeddings, y.embeddings, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# SpanConfig / get / set
# ---------------------------------------------------------------------------------------------


def test_span_config_defaults_and_replace():
    assert SpanConfig() == SpanConfig(1, 20, "word")
    assert SpanConfig(1, 20, "word").replace(max_span=10) == SpanConfig(1, 10, "word")
    assert SpanConfig(2, 3, "token").replace(min_span=None, unit=None) == SpanConfig(2, 3, "token")
    assert SpanConfig(2, 3, "token").to_dict() == {"min_span": 2, "max_span": 3, "unit": "token"}


@pytest.mark.parametrize(
    "kwargs", [dict(min_span=0), dict(min_span=3, max_span=2), dict(unit="char"), dict(max_span=2.5)]
)
def test_span_config_validates(kwargs):
    with pytest.raises(ValueError):
        SpanConfig(**kwargs)
    with pytest.raises(ValueError):
        SpanConfig().replace(**kwargs)


def test_get_span_config_defaults(tiny_model):
    assert get_span_config([]) == SpanConfig()
    assert get_span_config(tiny_model) == SpanConfig()


def test_set_span_config_updates_model_and_encode_defaults(make_tiny_model):
    model = make_tiny_model()
    assert set_span_config(model, min_span=2, max_span=3) == SpanConfig(2, 3, "word")
    assert get_span_config(model) == SpanConfig(2, 3, "word")
    assert set_span_config(model, unit="token") == SpanConfig(2, 3, "token")  # other settings kept
    result = model.encode_spans("a man plays the guitar")
    lengths = result.units[:, 1] - result.units[:, 0]
    assert set(lengths.tolist()) == {2, 3}
    # explicit arguments still win
    assert set(
        (lambda r: (r.units[:, 1] - r.units[:, 0]).tolist())(model.encode_spans("a b c", min_span=1, max_span=1))
    ) == {1}


def test_set_span_config_rejects_bad_settings(make_tiny_model):
    model = make_tiny_model()
    with pytest.raises(ValueError):
        set_span_config(model, min_span=5, max_span=2)
    with pytest.raises(ValueError):
        set_span_config(model, unit="sentence")
    assert get_span_config(model) == SpanConfig()  # unchanged
    with pytest.raises(ValueError, match="no Hugging Face transformer"):
        set_span_config([Pooling(8, "mean")], max_span=3)


# ---------------------------------------------------------------------------------------------
# Saving plain pipelines
# ---------------------------------------------------------------------------------------------


def test_set_span_config_survives_plain_save_and_load(make_tiny_model, tmp_path):
    model = make_tiny_model()
    set_span_config(model, min_span=2, max_span=5, unit="token")
    before = model.encode_spans(TEXTS)
    path = str(tmp_path / "plain")
    model.save(path)
    assert not any(t.startswith("slice_st") for t in module_types(path))

    loaded = SentenceTransformer(path, device="cpu")  # no trust flag needed
    assert get_span_config(loaded) == SpanConfig(2, 5, "token")
    after = loaded.encode_spans(TEXTS)
    assert_same_encodings(before, after)
    lengths = np.concatenate([r.units[:, 1] - r.units[:, 0] for r in after])
    assert lengths.min() == 2 and lengths.max() <= 5
    np.testing.assert_allclose(model.encode(TEXTS), loaded.encode(TEXTS), atol=1e-5)


def test_save_slice_model_from_span_pooling_loads_without_trust(make_tiny_model, tmp_path):
    reference = make_tiny_model()
    model = SpanPooling.attach(make_tiny_model(), min_span=1, max_span=3, unit="word")
    assert isinstance(model[1], SpanPooling)
    before = model.encode_spans(TEXTS)
    path = save_slice_model(model, str(tmp_path / "slice"))
    assert path == str(tmp_path / "slice")
    types = module_types(path)
    assert not any("slice_st" in t for t in types)
    assert any(t.endswith("Pooling") for t in types)

    loaded = SentenceTransformer(path, device="cpu")  # plain load, no trust_remote_code
    assert isinstance(loaded[1], Pooling) and loaded[1].pooling_mode == "mean"
    assert get_span_config(loaded) == SpanConfig(1, 3, "word")
    assert_same_encodings(before, loaded.encode_spans(TEXTS))
    # sentence embeddings are those of the original mean-pooled model
    np.testing.assert_allclose(loaded.encode(TEXTS), reference.encode(TEXTS), atol=1e-5)
    # the source model is untouched
    assert isinstance(model[1], SpanPooling)


def test_span_pooling_pipeline_needs_trust_remote_code(make_tiny_model, tmp_path):
    model = SpanPooling.attach(make_tiny_model(), min_span=1, max_span=4, unit="token")
    path = str(tmp_path / "span_pooling")
    model.save(path)
    assert "slice_st.models.span_pooling.SpanPooling" in module_types(path)
    with pytest.raises(ValueError):
        SentenceTransformer(path, device="cpu")
    loaded = SentenceTransformer(path, device="cpu", trust_remote_code=True)
    assert isinstance(loaded[1], SpanPooling)
    assert (loaded[1].min_span, loaded[1].max_span, loaded[1].unit) == (1, 4, "token")
    assert get_span_config(loaded) == SpanConfig(1, 4, "token")
    assert_same_encodings(model.encode_spans(TEXTS), loaded.encode_spans(TEXTS))


# ---------------------------------------------------------------------------------------------
# SpanPooling
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def span_pooling_model(make_tiny_model):
    return SpanPooling.attach(make_tiny_model(), min_span=1, max_span=3)


def test_attach_replaces_mean_pooling_and_requests_offsets(span_pooling_model):
    pooling = span_pooling_model[1]
    assert isinstance(pooling, SpanPooling)
    assert (pooling.min_span, pooling.max_span, pooling.unit) == (1, 3, "word")
    assert pooling.get_embedding_dimension() == 32
    text_kwargs = span_pooling_model[0].processing_kwargs["text"]
    assert text_kwargs["return_offsets_mapping"] and text_kwargs["return_special_tokens_mask"]


def test_span_pooling_sentence_embedding_equals_mean_pooling(span_pooling_model, tiny_model):
    expected = tiny_model.encode(TEXTS, convert_to_tensor=True)
    got = span_pooling_model.encode(TEXTS, convert_to_tensor=True)
    assert torch.allclose(got, expected, atol=1e-5)


def test_span_pooling_spans_match_encode_spans(span_pooling_model, tiny_model):
    outputs = span_pooling_model.encode(TEXTS, output_value=None, batch_size=8)
    expected = tiny_model.encode_spans(TEXTS, min_span=1, max_span=3)
    for out, result in zip(outputs, expected):
        mask = out["span_mask"]
        np.testing.assert_allclose(out["span_embeddings"][mask].numpy(), result.embeddings, atol=1e-5)
        np.testing.assert_array_equal(out["span_offsets"][mask].numpy(), result.offsets)
        assert out["span_embeddings"].shape[0] == out["span_mask"].shape[0]
        assert int(out["num_units"]) == len(result.text.split())


def test_span_pooling_forward_directly(span_pooling_model, tiny_model):
    """Calling the module pipeline on tokenized features (no encode) gives batch-shaped span outputs."""
    features = span_pooling_model.preprocess(TEXTS)
    with torch.no_grad():
        out = span_pooling_model(features)
    batch = len(TEXTS)
    spans = out["span_units"]  # the same (S, 2) grid repeated per row, so encode() can split it per text
    assert spans.shape[0] == batch and spans.shape[2] == 2
    assert all(torch.equal(spans[0], row) for row in spans)
    assert out["span_embeddings"].shape == (batch, spans.shape[1], 32)
    assert out["span_mask"].shape == (batch, spans.shape[1])
    assert out["span_offsets"].shape == (batch, spans.shape[1], 2)
    assert out["num_units"].tolist() == [len(t.split()) for t in TEXTS]
    mask = out["attention_mask"].unsqueeze(-1).float()
    mean = (out["token_embeddings"] * mask).sum(1) / mask.sum(1)
    assert torch.allclose(out["sentence_embedding"], mean, atol=1e-6)


def test_span_pooling_without_spans(make_tiny_model, tiny_model):
    model = SpanPooling.attach(make_tiny_model(), output_spans=False)
    out = model.encode(TEXTS[:1], output_value=None)[0]
    assert "span_embeddings" not in out
    assert torch.allclose(out["sentence_embedding"], tiny_model.encode(TEXTS[:1], convert_to_tensor=True)[0], atol=1e-5)


def test_span_pooling_span_units_shape_when_span_count_equals_batch_size(span_pooling_model):
    out = span_pooling_model.encode(["hello"], output_value=None)[0]  # one span, batch of one
    assert out["span_units"].shape == (out["span_embeddings"].shape[0], 2)


def test_attach_rejects_non_mean_pooling(make_tiny_model):
    from sentence_transformers.base.modules import Transformer

    model = make_tiny_model()
    cls_model = SentenceTransformer(modules=[model[0], Pooling(32, "cls")], device="cpu")
    with pytest.raises(ValueError, match="mean"):
        SpanPooling.attach(cls_model)
    no_pooling = SentenceTransformer(modules=[model[0]], device="cpu")
    with pytest.raises(ValueError, match="Pooling"):
        SpanPooling.attach(no_pooling)
    assert Transformer  # import path exists in sentence-transformers 6


def test_attach_uses_saved_settings(make_tiny_model):
    model = make_tiny_model()
    set_span_config(model, min_span=2, max_span=4, unit="token")
    SpanPooling.attach(model)
    assert (model[1].min_span, model[1].max_span, model[1].unit) == (2, 4, "token")
    set_span_config(model, max_span=6)  # writes the module too
    assert model[1].max_span == 6 and get_span_config(model) == SpanConfig(2, 6, "token")


@pytest.mark.parametrize("kwargs", [dict(min_span=0), dict(min_span=4, max_span=3), dict(unit="char")])
def test_span_pooling_validates(kwargs):
    with pytest.raises(ValueError):
        SpanPooling(32, **kwargs)


def test_load_model_default_and_missing(real_model):
    assert real_model.get_embedding_dimension() == 384
    with pytest.raises(FileNotFoundError):
        slice_st.load_model("/no/such/dir")
    with pytest.raises(FileNotFoundError):
        slice_st.load_model("./no/such/relative/dir")


def test_enable_span_features(make_tiny_model):
    model = make_tiny_model()
    model[0].processing_kwargs = {"text": {"padding": True}}
    assert slice_st.config.enable_span_features(model) is model
    text_kwargs = model[0].processing_kwargs["text"]
    assert text_kwargs == {"padding": True, "return_offsets_mapping": True, "return_special_tokens_mask": True}
    out = model.encode(["a man"], output_value=None)[0]
    assert "offset_mapping" in out and "special_tokens_mask" in out
    np.testing.assert_allclose(model.encode(["a man"]), make_tiny_model().encode(["a man"]), atol=1e-6)
    with pytest.raises(ValueError, match="processing_kwargs"):
        slice_st.config.enable_span_features([Pooling(8, "mean")])
