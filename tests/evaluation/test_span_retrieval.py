"""SpanRetrievalEvaluator and its two setups (slice_st.evaluation)."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from sentence_transformers.base.evaluation import BaseEvaluator

import slice_st
from slice_st.evaluation import SpanRetrievalEvaluator, score_full, score_single

PHRASES = [
    "a man plays guitar",
    "a dog runs",
    "the stock market fell",
    "a woman cooks",
    "kids play football",
]
PASSAGES = [
    "Late again. A man is playing a guitar on stage. The crowd cheered.",
    "It rained all day. A cat sleeps on the sofa, don't wake it. Nobody came.",
    "Prices rose. Shares dropped sharply on Monday (again). Traders left early.",
    "The bus was late. A lady is preparing food. It smelled good.",
    "Snow fell. Children are playing soccer in the park. The café closed.",
]
GOLD = [4.8, 1.0, 3.9, 4.2, 4.0]


def test_single_setup_is_best_spans_paired(tiny_model):
    result = score_single(tiny_model, PHRASES, PASSAGES, max_span=5)
    matches = slice_st.search.best_spans_paired(tiny_model, PHRASES, PASSAGES, max_span=5)
    assert result.scores.tolist() == pytest.approx([m.score for m in matches])
    assert result.spans == [(m.start, m.end) for m in matches]


def test_full_setup_is_the_cosine_of_encodings(tiny_model):
    result = score_full(tiny_model, PHRASES[:2], PASSAGES[:2])
    a, b = tiny_model.encode(PHRASES[:2]), tiny_model.encode(PASSAGES[:2])
    expected = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert result.scores == pytest.approx(expected, abs=1e-5)


def test_evaluator_metrics_files_and_model_card(tiny_model, tmp_path):
    evaluator = SpanRetrievalEvaluator(
        PHRASES, PASSAGES, GOLD, max_span=4, name="ctx", write_predictions=True
    )
    assert isinstance(evaluator, BaseEvaluator)
    metrics = evaluator(tiny_model, output_path=str(tmp_path), epoch=1, steps=10)
    expected = {f"ctx_{s}_{m}" for s in ("full", "single") for m in ("pearson", "spearman")}
    assert set(metrics) == expected
    assert evaluator.primary_metric == "ctx_single_spearman"
    assert all(-1 <= value <= 1 for value in metrics.values())
    with open(tmp_path / "span_retrieval_evaluation_ctx_results.csv") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][:4] == ["epoch", "steps", "full_pearson", "full_spearman"] and rows[1][:2] == [
        "1",
        "10",
    ]
    with open(tmp_path / "span_retrieval_predictions_ctx.csv") as handle:
        predictions = list(csv.DictReader(handle))
    assert len(predictions) == 2 * len(PHRASES)
    for row in predictions:
        if row["setup"] != "full":
            passage = PASSAGES[int(row["pair"])]
            assert passage[int(row["start"]) : int(row["end"])] == row["span"]
    assert tiny_model.model_card_data.eval_results_dict  # recorded in the model card data


def test_evaluator_setups_and_bad_input(tiny_model):
    evaluator = SpanRetrievalEvaluator(PHRASES, PASSAGES, GOLD, setups=("full",))
    assert set(evaluator(tiny_model)) == {"full_pearson", "full_spearman"}
    assert evaluator.primary_metric == "full_spearman"
    with pytest.raises(ValueError, match="setups"):
        SpanRetrievalEvaluator(PHRASES, PASSAGES, GOLD, setups=("bogus",))
    with pytest.raises(ValueError, match="pair up"):
        SpanRetrievalEvaluator(PHRASES, PASSAGES[:2], GOLD)
    with pytest.raises(ValueError, match=r"passages\[1\] is empty"):
        SpanRetrievalEvaluator(PHRASES[:3], ["a b", " ", "c"], GOLD[:3])
    with pytest.raises(ValueError, match="gold scores"):
        SpanRetrievalEvaluator(PHRASES, PASSAGES, GOLD[:2])
    with pytest.raises(ValueError, match="min_span"):
        SpanRetrievalEvaluator(PHRASES, PASSAGES, GOLD, min_span=3, max_span=2)


def test_works_as_trainer_evaluator(make_tiny_model, tmp_path):
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    model = make_tiny_model(128)
    train = Dataset.from_dict({"anchor": PHRASES, "positive": PASSAGES})
    evaluator = SpanRetrievalEvaluator(
        PHRASES, PASSAGES, GOLD, setups=("full", "single"), max_span=3, name="ctx"
    )
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=5,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=train,
        loss=MultipleNegativesRankingLoss(model),
        evaluator=evaluator,
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "eval_ctx_single_spearman" in entry]
    assert logged and -1 <= logged[-1]["eval_ctx_single_spearman"] <= 1
