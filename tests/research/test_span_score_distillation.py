"""SpanScoreDistillationLoss (research/): teacher similarities (any size) distilled into single-pass spans."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

import slice_st
from research.span_lab import shift_spans
from research.span_score_distillation import SpanScoreDistillationLoss

TEXTS = [
    "A man is playing the guitar on the stage tonight.",
    "The flight to Denver was delayed by three hours because of a storm.",
]


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
    BertModel(
        BertConfig(
            vocab_size=30522,
            hidden_size=48,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    ).save_pretrained(str(folder))
    transformer = models.Transformer(str(folder))
    model = SentenceTransformer(modules=[transformer, models.Pooling(48, "mean")])
    out = tmp_path_factory.mktemp("wide_st") / "model"
    model.save(str(out))
    return str(out)


def test_teacher_of_another_size_gives_finite_losses_and_student_gradients(
    tiny_model_dir, wide_teacher_dir
):
    model = slice_st.load_model(tiny_model_dir)
    loss = SpanScoreDistillationLoss(
        model, teacher=wide_teacher_dir, spans_per_text=6, max_span=4, seed=0
    )
    parts = loss([model.preprocess(TEXTS)])
    assert set(parts) == {"listwise", "cosine"} and all(
        torch.isfinite(v) and v >= 0 for v in parts.values()
    )
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
    with (
        torch.no_grad()
    ):  # one-word texts: a single span each, in-batch candidates still give a list to rank
        parts = loss([model.preprocess(["guitar", "storm"])])
    assert all(torch.isfinite(value) for value in parts.values())
    assert (
        "teacher" in loss.get_config_dict()
        and "2405.07263" in loss.citation
        and "contributors" not in loss.citation
    )


def test_shift_spans_stays_inside_rows():
    generator = torch.Generator().manual_seed(0)
    starts, ends = torch.tensor([[0, 3], [-1, -1]]), torch.tensor([[2, 6], [-1, -1]])
    s, e = shift_spans(starts, ends, torch.tensor([7, 0]), 50, 2, generator=generator)
    assert bool(((s[0] >= 0) & (e[0] <= 7) & (e[0] > s[0])).all()) and bool((s[1] == -1).all())
    with pytest.raises(ValueError):
        shift_spans(starts, ends, torch.tensor([7, 0]), -1, 2)


def test_train_with_score_distillation_and_a_wider_teacher(
    tmp_path, tiny_model_dir, wide_teacher_dir
):
    """The loss trains with sentence-transformers' own trainer, on a column of texts, against a wider teacher."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    model = slice_st.load_model(tiny_model_dir)
    before = model.encode(TEXTS)
    loss = SpanScoreDistillationLoss(
        model, teacher=wide_teacher_dir, spans_per_text=4, max_span=3, seed=0
    )
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    SentenceTransformerTrainer(
        model=model, args=args, train_dataset=Dataset.from_dict({"text": TEXTS * 8}), loss=loss
    ).train()
    assert abs(model.encode(TEXTS) - before).max() > 1e-6


def test_the_loss_under_study_is_not_in_the_package():
    import slice_st.losses

    assert "Status:" in SpanScoreDistillationLoss.__doc__
    for name in ("SpanMaxCoSENTLoss", "SpanScoreDistillationLoss"):
        assert name not in slice_st.__all__ and name not in slice_st.losses.__all__
        with pytest.raises(AttributeError):
            getattr(slice_st, name)
