"""SpanScoreDistillationLoss: teacher similarities (any embedding size) distilled into single-pass spans."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

import slice_st
from slice_st import SpanScoreDistillationLoss
from slice_st.spans import shift_spans

TEXTS = ["A man is playing the guitar on the stage tonight.", "The flight to Denver was delayed by three hours because of a storm."]


@pytest.fixture(scope="module")
def wide_teacher_dir(tmp_path_factory, tiny_model_dir) -> str:
    """A second tiny BERT with another width (48): a teacher whose vectors cannot be compared with the student's."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("wide") / "bert"
    folder.mkdir()
    for name in os.listdir(tiny_model_dir):
        if name.startswith(("tokenizer", "vocab", "special")):
            shutil.copy(os.path.join(tiny_model_dir, name), folder / name)
    torch.manual_seed(1)
    BertModel(BertConfig(vocab_size=30522, hidden_size=48, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=128)).save_pretrained(str(folder))
    transformer = models.Transformer(str(folder))
    model = SentenceTransformer(modules=[transformer, models.Pooling(48, "mean")])
    out = tmp_path_factory.mktemp("wide_st") / "model"
    model.save(str(out))
    return str(out)


def test_teacher_of_another_size_gives_finite_losses_and_student_gradients(tiny_model_dir, wide_teacher_dir):
    model = slice_st.load_model(tiny_model_dir)
    loss = SpanScoreDistillationLoss(model, teacher=wide_teacher_dir, spans_per_text=6, max_span=4, seed=0)
    parts = loss([model.preprocess(TEXTS)])
    assert set(parts) == {"listwise", "cosine"} and all(torch.isfinite(v) and v >= 0 for v in parts.values())
    sum(parts.values()).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert all(p.grad is None for p in loss.teacher.parameters())  # the teacher never trains
    assert loss.teacher.get_embedding_dimension() == 48 != model.get_embedding_dimension()


def test_self_teacher_string_path_matches_ids_path(tiny_model_dir):
    model = slice_st.load_model(tiny_model_dir)
    by_ids = SpanScoreDistillationLoss(model, spans_per_text=6, max_span=3, seed=5)
    by_text = SpanScoreDistillationLoss(model, spans_per_text=6, max_span=3, seed=5)
    by_text._ids_path = False  # as for a teacher with another tokenizer: decoded span strings through teacher.encode
    with torch.no_grad():
        a, b = by_ids([model.preprocess(TEXTS)]), by_text([model.preprocess(TEXTS)])
    assert a["listwise"].item() == pytest.approx(b["listwise"].item(), abs=1e-4)


def test_bad_arguments_and_config(tiny_model_dir):
    model = slice_st.load_model(tiny_model_dir)
    with pytest.raises(ValueError, match="spans_per_text"):
        SpanScoreDistillationLoss(model, spans_per_text=1)
    with pytest.raises(ValueError, match="temperature"):
        SpanScoreDistillationLoss(model, temperature=0)
    with pytest.raises(ValueError, match="shifted_fraction"):
        SpanScoreDistillationLoss(model, shifted_fraction=1.0)
    loss = SpanScoreDistillationLoss(model, spans_per_text=4, max_span=3)
    with pytest.raises(ValueError, match="one text column"):
        loss([model.preprocess(["a b"]), model.preprocess(["c d"])])
    with torch.no_grad():  # one-word texts: a single span each, in-batch candidates still give a list to rank
        parts = loss([model.preprocess(["guitar", "storm"])])
    assert all(torch.isfinite(value) for value in parts.values())
    assert "teacher" in loss.get_config_dict() and "score distillation" in loss.citation.lower()


def test_phrase_term_matches_the_teachers_similarities_between_phrases_alone(tiny_model_dir, wide_teacher_dir):
    model = slice_st.load_model(tiny_model_dir)
    plain = SpanScoreDistillationLoss(model, teacher=wide_teacher_dir, spans_per_text=6, max_span=4, seed=3)
    keep = SpanScoreDistillationLoss(model, teacher=wide_teacher_dir, spans_per_text=6, max_span=4, phrase_weight=2.0, seed=3)
    with torch.no_grad():
        a, b = plain([model.preprocess(TEXTS)]), keep([model.preprocess(TEXTS)])
    assert "phrase" not in a and b["phrase"] > 0  # a random student's phrases disagree with a random teacher's
    assert b["listwise"].item() == pytest.approx(a["listwise"].item(), abs=1e-5)  # same spans, same seed: only the new term
    model.zero_grad()
    b = keep([model.preprocess(TEXTS)])
    b["phrase"].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert keep.get_config_dict()["phrase_weight"] == 2.0
    with pytest.raises(ValueError, match="weights"):
        SpanScoreDistillationLoss(model, phrase_weight=-1.0)


def test_vector_term_pulls_single_pass_spans_to_the_teachers_vectors(tiny_model_dir):
    model = slice_st.load_model(tiny_model_dir)
    plain = SpanScoreDistillationLoss(model, spans_per_text=6, max_span=4, seed=2)
    both = SpanScoreDistillationLoss(model, spans_per_text=6, max_span=4, vector_weight=1.0, seed=2)
    with torch.no_grad():
        a, b = plain([model.preprocess(TEXTS)]), both([model.preprocess(TEXTS)])
    assert "vector" not in a and set(b) == {"listwise", "cosine", "vector"}
    assert 0 < b["vector"].item() < 2 and b["listwise"].item() == pytest.approx(a["listwise"].item(), abs=1e-5)
    assert both.get_config_dict()["vector_weight"] == 1.0


def test_vector_term_needs_a_teacher_of_the_students_size(tiny_model_dir, wide_teacher_dir):
    model = slice_st.load_model(tiny_model_dir)
    with pytest.raises(ValueError, match="student's size"):
        SpanScoreDistillationLoss(model, teacher=wide_teacher_dir, vector_weight=1.0)


def test_shift_spans_stays_inside_rows():
    generator = torch.Generator().manual_seed(0)
    starts, ends = torch.tensor([[0, 3], [-1, -1]]), torch.tensor([[2, 6], [-1, -1]])
    s, e = shift_spans(starts, ends, torch.tensor([7, 0]), 50, 2, generator=generator)
    assert bool(((s[0] >= 0) & (e[0] <= 7) & (e[0] > s[0])).all()) and bool((s[1] == -1).all())
    with pytest.raises(ValueError):
        shift_spans(starts, ends, torch.tensor([7, 0]), -1, 2)


def test_train_with_score_distillation_and_a_wider_teacher(tmp_path, tiny_model_dir, wide_teacher_dir):
    from datasets import Dataset

    from slice_st.training.trainer import TrainConfig, train

    passages = tmp_path / "passages"
    Dataset.from_dict({"text": TEXTS * 8}).save_to_disk(str(passages))
    config = TrainConfig(output_dir=str(tmp_path / "run"), model=tiny_model_dir, distill_data=[str(passages)], distill_loss="score",
                         teacher=wide_teacher_dir, distill_spans=4, distill_max_span=3, distill_phrase_weight=1.0, max_steps=2,
                         batch_size=4, learning_rate=1e-3, eval_steps=1, save_steps=1, logging_steps=1)
    before = slice_st.load_model(tiny_model_dir).encode(TEXTS)
    after = train(config).encode(TEXTS)
    assert abs(after - before).max() > 1e-6
    with pytest.raises(ValueError, match="distill_loss"):
        TrainConfig(output_dir=str(tmp_path), distill_data=[str(passages)], distill_loss="both").validate()
    with pytest.raises(ValueError, match="distill-loss score"):
        TrainConfig(output_dir=str(tmp_path), distill_data=[str(passages)], distill_phrase_weight=1.0).validate()
