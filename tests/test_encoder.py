"""``SpanEncoder``: a ``SentenceTransformer`` whose span methods are real methods; what it saves loads in plain
sentence-transformers without ``trust_remote_code``."""

from __future__ import annotations

import json

import numpy as np
from sentence_transformers import SentenceTransformer

import slice_st
from slice_st import SpanEncoder


def test_load_model_returns_a_span_encoder(real_model):
    assert type(real_model) is SpanEncoder and isinstance(real_model, SentenceTransformer)
    assert (
        SpanEncoder.best_spans is slice_st.best_spans
        and SpanEncoder.encode_spans is slice_st.encode_spans
    )
    assert SpanEncoder.encode_span_queries is slice_st.encode_span_queries
    assert (
        real_model.best_spans("a young dog", "The cat and the puppy slept.", max_span=3)[0][0][
            0
        ].span
        == "the puppy"
    )


def test_a_saved_span_encoder_loads_as_a_plain_sentence_transformer(tiny_model_dir, tmp_path):
    model = SpanEncoder(tiny_model_dir, device="cpu")
    model.save(str(tmp_path / "saved"))
    config = json.loads(
        (tmp_path / "saved" / "config_sentence_transformers.json").read_text(encoding="utf-8")
    )
    assert config["model_type"] == "SentenceTransformer"
    assert all(
        entry["type"].startswith("sentence_transformers.")
        for entry in json.loads((tmp_path / "saved" / "modules.json").read_text())
    )
    plain = SentenceTransformer(str(tmp_path / "saved"), device="cpu", trust_remote_code=False)
    assert type(plain) is SentenceTransformer
    text = "A man plays the guitar on the street."
    np.testing.assert_allclose(
        plain.encode_spans(text).embeddings, model.encode_spans(text).embeddings, atol=1e-5
    )
    again = SpanEncoder(str(tmp_path / "saved"), device="cpu")  # and as a SpanEncoder again
    assert (
        again.best_spans("guitar", text)[0][0][0].span
        == model.best_spans("guitar", text)[0][0][0].span
    )
