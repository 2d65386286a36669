"""SpanMaxCrossEntropyLoss: value and gradients against a naive loop reference, both training APIs, bad rows."""

from __future__ import annotations

import math

import pytest
import torch

import slice_st
from slice_st import SpanMaxCrossEntropyLoss
from slice_st.config import enable_span_features

ANCHORS = ["plays the guitar", "stock prices fell", "a dog runs"]
POSITIVES = [
    "Yesterday a man played the guitar on stage, loudly.",
    "On Monday the markets dropped sharply.",
    "In the park two dogs were running.",
]
NEGATIVES = ["The cat sleeps all day.", "A woman is cooking rice.", "Tea is served at five."]


def _naive_words(
    offsets: list[list[int]], special: list[int], attention: list[int]
) -> list[tuple[int, int]]:
    """Token ranges of whitespace words, from offsets: a new word starts where offsets do not touch."""
    words, previous_end = [], None
    for position, ((start, end), is_special, attended) in enumerate(
        zip(offsets, special, attention)
    ):
        if is_special or not attended:
            continue
        if previous_end is None or start > previous_end:
            words.append([position, position + 1])
        else:
            words[-1][1] = position + 1
        previous_end = end
    return [tuple(word) for word in words]


def _naive_loss(model, columns, scale, min_span, max_span, in_batch=False):
    outputs = [model(model.preprocess(column)) for column in columns]

    def units(out, row):
        return _naive_words(
            out["offset_mapping"][row].tolist(),
            out["special_tokens_mask"][row].tolist(),
            out["attention_mask"][row].tolist(),
        )

    def query(row):
        out = outputs[0]
        words = units(out, row)
        return out["token_embeddings"][row, words[0][0] : words[-1][1]].mean(0)

    def best(query_vector, out, row):
        words = units(out, row)
        scores = []
        for i in range(len(words)):
            for length in range(min_span, max_span + 1):
                if i + length > len(words):
                    break
                span = out["token_embeddings"][row, words[i][0] : words[i + length - 1][1]].mean(0)
                scores.append(torch.cosine_similarity(query_vector, span, dim=0))
        return torch.stack(scores).max()

    rows = len(columns[0])
    losses = []
    for i in range(rows):
        q = query(i)
        if in_batch:
            logits = torch.stack([best(q, out, j) for out in outputs[1:] for j in range(rows)])
            target = i
        else:
            logits = torch.stack([best(q, out, i) for out in outputs[1:]])
            target = 0
        similarities = scale * (logits + 1) / 2
        losses.append(-similarities[target] + torch.logsumexp(similarities, dim=0))
    return torch.stack(losses).mean()


def _grads(model):
    return [
        p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()
    ]


@pytest.mark.parametrize("in_batch", [False, True])
def test_loss_and_gradients_match_naive_reference(make_tiny_model, in_batch):
    model = enable_span_features(make_tiny_model())
    loss = SpanMaxCrossEntropyLoss(
        model, scale=30.0, min_span=1, max_span=4, in_batch_negatives=in_batch
    )
    columns = [ANCHORS, POSITIVES, NEGATIVES]
    model.zero_grad()
    value = loss([model.preprocess(column) for column in columns], torch.zeros(3))
    value.backward()
    ours = _grads(model)
    model.zero_grad()
    reference = _naive_loss(model, columns, 30.0, 1, 4, in_batch)
    reference.backward()
    theirs = _grads(model)
    assert value.item() == pytest.approx(reference.item(), rel=1e-4, abs=1e-6)
    assert all(torch.isfinite(g).all() for g in ours)
    assert any(g.abs().sum() > 0 for g in ours)
    for mine, naive in zip(ours, theirs):
        torch.testing.assert_close(mine, naive, rtol=1e-3, atol=1e-6)


def test_several_negatives_and_config(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    loss = SpanMaxCrossEntropyLoss(model, max_span=3)
    columns = [ANCHORS, POSITIVES, NEGATIVES, list(reversed(NEGATIVES))]
    value = loss([model.preprocess(column) for column in columns], torch.zeros(3))
    reference = _naive_loss(model, columns, 30.0, 1, 3)
    assert value.item() == pytest.approx(reference.item(), rel=1e-4)
    assert loss.get_config_dict() == {
        "scale": 30.0,
        "min_span": 1,
        "max_span": 3,
        "unit": "word",
        "in_batch_negatives": False,
        "gather_across_devices": False,
    }
    assert "2405.07263" in loss.citation


def test_formula_for_one_triplet(make_tiny_model):
    """L = -λ s⁺ + log(e^{λ s⁺} + e^{λ s⁻}) with s = (cos + 1) / 2 of the best spans."""
    model = enable_span_features(make_tiny_model())
    loss = SpanMaxCrossEntropyLoss(model, scale=30.0, max_span=10)
    value = loss(
        [model.preprocess(c) for c in (ANCHORS[:1], POSITIVES[:1], NEGATIVES[:1])], torch.zeros(1)
    ).item()
    result = slice_st.search.best_spans_paired(
        model, ANCHORS[:1] * 2, [POSITIVES[0], NEGATIVES[0]], max_span=10, scorer="max-cosine"
    )
    positive, negative = ((m.score + 1) / 2 for m in result)
    expected = -30 * positive + math.log(math.exp(30 * positive) + math.exp(30 * negative))
    assert value == pytest.approx(expected, rel=1e-3, abs=1e-5)


def test_rows_without_spans_are_skipped_and_counted(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    loss = SpanMaxCrossEntropyLoss(model, min_span=3, max_span=4)
    columns = [ANCHORS[:2], ["ok", POSITIVES[1]], NEGATIVES[:2]]  # "ok" is shorter than min_span
    value = loss([model.preprocess(column) for column in columns], torch.zeros(2))
    assert torch.isfinite(value)
    assert loss.skipped_rows == 1
    value.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_too_few_columns_is_a_clear_error(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    loss = SpanMaxCrossEntropyLoss(model)
    with pytest.raises(ValueError, match="needs columns"):
        loss([model.preprocess(ANCHORS), model.preprocess(POSITIVES)], torch.zeros(3))


def test_trainer_and_fit_both_train(make_tiny_model, tmp_path):
    from datasets import Dataset
    from sentence_transformers import (
        InputExample,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from torch.utils.data import DataLoader

    model = enable_span_features(make_tiny_model())
    before = [p.detach().clone() for p in model.parameters()]
    loss = SpanMaxCrossEntropyLoss(model, max_span=4)
    dataset = Dataset.from_dict({"anchor": ANCHORS, "positive": POSITIVES, "negative": NEGATIVES})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=3,
        report_to=[],
        save_strategy="no",
        learning_rate=1e-3,
        use_cpu=True,
    )
    SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss).train()
    after_trainer = [p.detach().clone() for p in model.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(before, after_trainer))
    assert all(torch.isfinite(p).all() for p in after_trainer)

    examples = [InputExample(texts=list(row)) for row in zip(ANCHORS, POSITIVES, NEGATIVES)]
    model.fit(
        train_objectives=[(DataLoader(examples, batch_size=3), loss)],
        epochs=1,
        warmup_steps=0,
        optimizer_params={"lr": 1e-3},
        show_progress_bar=False,
    )
    assert any(not torch.equal(a, p.detach()) for a, p in zip(after_trainer, model.parameters()))
