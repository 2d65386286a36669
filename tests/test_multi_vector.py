"""sentence-transformers' ``MultiVectorEncoder`` (ColBERT / PyLate family) both ways: span encoding, best_spans and
SpanIndex on a ColBERT checkpoint's token vectors (slice_st/encode.py holds the rule), and a SLICE model as a
``MultiVectorEncoder`` (slice_st/multi_vector.py). The ColBERT model is the tiny random BERT saved as PyLate (<= 3)
saved its checkpoints, loaded by ``MultiVectorEncoder(path)`` itself."""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np
import pytest
import torch

import slice_st
from slice_st.errors import SpanInputError
from slice_st.multi_vector import to_multi_vector

QUERY_LENGTH, DOCUMENT_LENGTH = 12, 24
TEXT = "A man, who plays the guitar - sang loudly."


@pytest.fixture(scope="module")
def colbert_dir(tiny_model_dir, tmp_path_factory) -> str:
    """A PyLate (<= 3) ColBERT checkpoint: the tiny BERT with a token-level projection 32 → 16, ``[unused0]`` /
    ``[unused1]`` query and document markers, queries expanded to 12 tokens (attended), documents cut at 24 tokens,
    and PyLate's punctuation skiplist."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Transformer

    folder = tmp_path_factory.mktemp("colbert")
    torch.manual_seed(1)
    projection = Dense(
        32, 16, bias=False, activation_function=None, module_input_name="token_embeddings"
    )
    pipeline = [Transformer(tiny_model_dir, max_seq_length=128), projection]
    SentenceTransformer(modules=pipeline, device="cpu").save(str(folder))
    modules = json.loads((folder / "modules.json").read_text())
    modules[1]["type"] = "pylate.models.Dense.Dense"
    (folder / "modules.json").write_text(json.dumps(modules))
    dense = json.loads((folder / "1_Dense" / "config.json").read_text())
    for key in ("module_input_name", "module_output_name"):  # PyLate's Dense had neither
        dense.pop(key)
    (folder / "1_Dense" / "config.json").write_text(json.dumps(dense))
    settings = {
        "model_type": "ColBERT",
        "query_prefix": "[unused0]",
        "document_prefix": "[unused1]",
    }
    settings |= {
        "query_length": QUERY_LENGTH,
        "document_length": DOCUMENT_LENGTH,
        "attend_to_expansion_tokens": True,
    }
    settings |= {"skiplist_words": list(string.punctuation), "do_query_expansion": True}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(settings))
    return str(folder)


@pytest.fixture(scope="module")
def colbert(colbert_dir):
    from sentence_transformers import MultiVectorEncoder

    return MultiVectorEncoder(colbert_dir, device="cpu").eval()


def test_the_fixture_is_a_colbert_checkpoint(colbert):
    assert type(colbert).__name__ == "MultiVectorEncoder" and colbert.similarity_fn_name == "maxsim"
    assert colbert.prompts["query"].startswith("[unused0]") and colbert.prompts[
        "document"
    ].startswith("[unused1]")
    assert (
        colbert[0].query_expansion["length"] == QUERY_LENGTH
        and colbert[0].document_length == DOCUMENT_LENGTH
    )
    assert colbert.get_embedding_dimension() == 16 and "," in colbert[2].skiplist_words


def _own_tokens(colbert, text: str, role: str):
    """The model's own outputs for ``text`` as ``encode_query`` / ``encode_document`` give them: token vectors, the
    scoring mask, character offsets in ``text``, and which tokens are the text's (not special, not the marker)."""
    encode = colbert.encode_query if role == "query" else colbert.encode_document
    kwargs = {"text": {"return_offsets_mapping": True, "return_special_tokens_mask": True}}
    out = encode(text, output_value=None, processing_kwargs=kwargs)
    marker = len(colbert.prompts[role])
    offsets = out["offset_mapping"] - marker
    text_tokens = (out["special_tokens_mask"] == 0) & (out["offset_mapping"][:, 0] >= marker)
    return out["token_embeddings"], out["attention_mask"].bool(), offsets, text_tokens


def test_span_vectors_are_means_of_the_models_scored_token_vectors(colbert):
    """Its projection and normalisation, its document marker, and its skiplist: the comma and the dash are out."""
    vectors, scored, offsets, text_tokens = _own_tokens(colbert, TEXT, "document")
    encoding = slice_st.encode_spans(colbert, TEXT, max_span=3)
    assert encoding.embeddings.shape[1] == 16
    checked = 0
    for (start, end), span, vector in zip(encoding.offsets, encoding.spans, encoding.embeddings):
        inside = text_tokens & (offsets[:, 0] >= start) & (offsets[:, 1] <= end) & scored
        np.testing.assert_allclose(vector, vectors[inside].mean(0).numpy(), atol=1e-5, err_msg=span)
        checked += 1
    assert checked == len(encoding) > 20
    by_span = dict(zip(encoding.spans, encoding.embeddings))
    assert np.linalg.norm(by_span["man,"]) == pytest.approx(
        1.0, abs=1e-5
    )  # one scored token: a unit vector
    assert (
        "-" not in by_span and "guitar -" in by_span
    )  # a span of skiplisted tokens only is no span
    matches = slice_st.best_spans(
        colbert, "-", TEXT, max_span=1, top_k=20, overlap=True, scorer="max-cosine"
    )
    assert len(matches[0][0]) == len(TEXT.split()) - 1 and "-" not in {
        match.span for match in matches[0][0]
    }


def test_query_vectors_are_the_mean_of_the_query_own_tokens(colbert):
    """Encoded as encode_query encodes it (its marker, the expansion it attends to), the marker and expansion tokens
    left out of the mean."""
    query = "plays the guitar"
    vectors, _, _, text_tokens = _own_tokens(colbert, query, "query")
    found = slice_st.encode_span_queries(colbert, [query])[0]
    np.testing.assert_allclose(found, vectors[text_tokens].mean(0).numpy(), atol=1e-5)
    as_document = slice_st.encode_spans(colbert, query, min_span=3, max_span=3).embeddings[0]
    assert not np.allclose(found, as_document, atol=1e-3)  # the query side is not the document side


def test_best_spans_and_the_index_rank_by_cosine_of_those_vectors(colbert):
    query = "plays the guitar"
    encoding = slice_st.encode_spans(colbert, TEXT, max_span=3, normalize_embeddings=True)
    vector = slice_st.encode_span_queries(colbert, query, normalize_embeddings=True)
    cosines = encoding.embeddings @ vector
    best = int(np.argmax(cosines))
    match = slice_st.best_spans(colbert, query, TEXT, max_span=3, scorer="max-cosine")[0][0][0]
    assert (match.span, match.score) == (
        encoding.spans[best],
        pytest.approx(float(cosines[best]), abs=1e-5),
    )
    texts = [TEXT, "The flight was late."]
    index = slice_st.SpanIndex.build(texts, colbert, max_span=3)
    found = index.search(query, top_k=1, scorer="max-cosine")[0][0]
    best = slice_st.best_spans(colbert, query, texts, max_span=3, scorer="max-cosine").ranked(0)[0]
    assert (int(found.doc_id), found.span, found.score) == (
        best.text_index,
        best.span,
        pytest.approx(best.score, 1e-5),
    )
    assert slice_st.best_spans(colbert, query, TEXT, max_span=3).similarity_fn_name == "cosine"


def test_texts_and_queries_longer_than_its_lengths_are_windowed(colbert):
    """Documents in windows within document_length, queries within the expansion length: every word is in a span."""
    text = " ".join(f"word{n}" for n in range(60))  # several tokens a word: far past 24 tokens
    encoding = slice_st.encode_spans(colbert, text, min_span=1, max_span=1)
    assert encoding.spans == text.split()
    vector = slice_st.encode_span_queries(colbert, text)
    assert vector.shape == (16,) and np.isfinite(vector).all()


def test_maxsim_cannot_rank_spans(colbert):
    with pytest.raises(SpanInputError, match="MaxSim over a span's tokens never falls"):
        slice_st.best_spans(colbert, "a man", TEXT, similarity_fn_name="maxsim")


def test_span_methods_are_attached_to_multi_vector_encoders(colbert):
    match = colbert.best_spans("plays the guitar", TEXT, max_span=3)[0][0][0]
    assert match == slice_st.best_spans(colbert, "plays the guitar", TEXT, max_span=3)[0][0][0]


# ------------------------------------------------------------------------------ a SLICE model as a MultiVectorEncoder
def test_to_multi_vector_scores_the_models_own_token_vectors_by_maxsim(tiny_model, tmp_path):
    colbert = to_multi_vector(tiny_model, skiplist_words=list(string.punctuation))
    texts = ["A man plays the guitar.", "The flight was late"]
    tokens = tiny_model.encode(texts, output_value="token_embeddings")
    documents = colbert.encode_document(texts)
    assert (
        len(documents[0]) == len(tokens[0]) - 1
    )  # the full stop is skipped; [CLS] and [SEP] are scored
    np.testing.assert_allclose(
        documents[1].numpy(), torch.nn.functional.normalize(tokens[1], dim=-1).numpy(), atol=1e-5
    )
    queries = colbert.encode_query(["guitar", "flight"])
    scores = colbert.similarity(queries, documents)
    expected = [[float((q @ d.T).max(dim=1).values.sum()) for d in documents] for q in queries]
    np.testing.assert_allclose(scores.numpy(), expected, atol=1e-4)

    from sentence_transformers import MultiVectorEncoder

    colbert.save(str(tmp_path / "colbert"))
    reloaded = MultiVectorEncoder(str(tmp_path / "colbert"), device="cpu")
    np.testing.assert_allclose(
        reloaded.similarity(queries, reloaded.encode_document(texts)).numpy(), scores, atol=1e-5
    )
    assert slice_st.get_span_config(reloaded) == slice_st.get_span_config(tiny_model)


def test_to_multi_vector_leaves_the_model_alone(tiny_model):
    colbert = to_multi_vector(tiny_model)
    assert colbert[0] is not tiny_model[0] and colbert.similarity_fn_name == "maxsim"
    assert type(tiny_model).__name__ == "SentenceTransformer" and len(tiny_model) == 2


def test_to_multi_vector_errors(tiny_model, colbert):
    with pytest.raises(SpanInputError, match="give a name or folder"):
        to_multi_vector(tiny_model, device="cpu")
    with pytest.raises(SpanInputError, match="MultiVectorEncoder already"):
        to_multi_vector(colbert)
    with pytest.raises(SpanInputError, match="first module is a Transformer"):
        to_multi_vector(torch.nn.Linear(2, 2))


def test_the_fixture_folder_is_pylate_format(colbert_dir):
    settings = json.loads((Path(colbert_dir) / "config_sentence_transformers.json").read_text())
    assert settings["model_type"] == "ColBERT"


def test_an_index_built_with_a_colbert_checkpoint_reopens_with_it(colbert_dir, tmp_path):
    from sentence_transformers import MultiVectorEncoder

    from slice_st.multi_vector import is_multi_vector_folder

    index = slice_st.SpanIndex.build(
        [TEXT, "The flight was late."], MultiVectorEncoder(colbert_dir), max_span=3
    )
    index.save(tmp_path / "index")
    reopened = slice_st.SpanIndex.load(
        tmp_path / "index"
    )  # the recorded folder, as a MultiVectorEncoder
    assert type(reopened.model).__name__ == "MultiVectorEncoder"
    assert reopened.search("the guitar", top_k=2) == index.search("the guitar", top_k=2)
    assert is_multi_vector_folder(colbert_dir) and not is_multi_vector_folder(tmp_path)
    with pytest.raises(SpanInputError, match="do not apply"):
        slice_st.SpanIndex.load(tmp_path / "index", backend="onnx")


def test_the_command_line_reads_a_colbert_folder_as_a_multi_vector_encoder(
    colbert, colbert_dir, tmp_path, capsys
):
    """``--model FOLDER`` of a ColBERT / PyLate checkpoint mines with its own token vectors (its projection kept), as
    ``best_spans`` does in Python, with the cache and without, and builds an index; backend options are refused."""
    from helpers import cli_fails, run_cli

    corpus = tmp_path / "calls.txt"
    corpus.write_text(f"{TEXT}\n")
    expected = colbert.best_spans(["plays the guitar"], [TEXT], top_k=1)[0][0][0]
    rows = []
    for extra in ([], ["--no-cache"], []):  # the third run reads the cache the first wrote
        code, out = run_cli(
            capsys,
            "mine",
            corpus,
            "-q",
            "plays the guitar",
            "--model",
            colbert_dir,
            "-f",
            "jsonl",
            *extra,
        )
        assert code == 0, out.err
        rows.append(json.loads(out.out.splitlines()[0]))
    assert [row["span"] for row in rows] == [expected.span] * 3
    assert all(
        abs(row["score"] - expected.score) < 1e-4 for row in rows
    )  # compared at the precision shown
    code, out = run_cli(
        capsys, "index", "build", corpus, "-o", tmp_path / "idx", "--model", colbert_dir, "--quiet"
    )
    assert code == 0, out.err
    assert "MultiVectorEncoder" in cli_fails(
        capsys, "mine", corpus, "-q", "guitar", "--model", colbert_dir, "--model-dtype", "bfloat16"
    )
