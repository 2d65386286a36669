"""Training closer to the target: graded pairs in context (SpanMaxCoSENTLoss), LoRA adapters, on-topic contexts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import slice_st
from slice_st import SpanMaxCoSENTLoss
from slice_st.config import has_adapters
from slice_st.data.contexts import on_topic_contexts
from slice_st.training.trainer import TrainConfig, train

FIXTURES = Path(__file__).parent / "fixtures"
DEV = str(FIXTURES / "stsb_context_sample.tsv")

ROWS = [
    ("a man plays the guitar", "It rained all day. Later a man played the guitar on stage, and people clapped.", 1.0),
    ("a man plays the guitar", "It rained all day. Later a woman sang on stage, and people clapped.", 0.3),
    ("stock prices fell", "Nobody expected it, but on Monday the markets dropped sharply after the report.", 0.9),
    ("stock prices fell", "Nobody expected it, but on Monday the bakery sold out after the report.", 0.0),
]


@pytest.fixture(scope="module")
def sts_jsonl(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("sts") / "pairs.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for query, passage, score in ROWS * 4:
            handle.write(json.dumps({"query": query, "passage": passage, "score": score}) + "\n")
    return str(path)


def test_cosent_loss_orders_pairs_and_gets_gradients(tiny_model_dir):
    model = slice_st.load_model(tiny_model_dir)
    loss = SpanMaxCoSENTLoss(model, max_span=4)
    columns = [model.preprocess([r[0] for r in ROWS]), model.preprocess([r[1] for r in ROWS])]
    value = loss(columns, torch.tensor([r[2] for r in ROWS]))
    value.backward()
    assert value.item() > 0 and any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    # all scores tied → log(1 + number of ordered pairs); equal labels give no pairs → log 1 = 0
    assert loss(columns, torch.zeros(len(ROWS))).item() == pytest.approx(0.0)
    assert loss.get_config_dict()["scale"] == 20.0 and "CoSENT" in loss.citation


def test_cosent_loss_bad_input(tiny_model_dir):
    model = slice_st.load_model(tiny_model_dir)
    loss = SpanMaxCoSENTLoss(model)
    column = model.preprocess(["a b"])
    with pytest.raises(ValueError, match="columns"):
        loss([column], torch.tensor([1.0]))
    with pytest.raises(ValueError, match="label"):
        loss([column, column], None)
    with pytest.raises(ValueError, match="scale"):
        SpanMaxCoSENTLoss(model, scale=0)


def test_on_topic_contexts_place_the_target_and_avoid_paraphrases(tiny_model_dir):
    model = slice_st.load_model(tiny_model_dir)
    pool = [f"Sentence number {i} talks about the beach and the sea." for i in range(12)] + ["A dog barks.", "Boys play soccer on the beach."]
    targets = ["Boys play soccer on the beach.", "The market fell sharply."]
    first = on_topic_contexts(targets, pool, model, avoid=["Kids kick a ball.", "Stocks dropped."], min_words=20, seed=3)
    again = on_topic_contexts(targets, pool, model, avoid=["Kids kick a ball.", "Stocks dropped."], min_words=20, seed=3)
    assert first == again  # seeded
    for target, passage in zip(targets, first):
        inside = passage.text[passage.start : passage.end]
        assert inside.lower().rstrip(".") == target.lower().rstrip(".")
        assert passage.text.count("Boys play soccer on the beach") <= 1  # the target itself is never a neighbour
        assert len(passage.text.split()) >= 12
    with pytest.raises(ValueError, match="one text per target"):
        on_topic_contexts(targets, pool, model, avoid=["x"])
    with pytest.raises(ValueError, match="at least 3"):
        on_topic_contexts(targets, pool[:2], model)
    for bad in (["  "], [123]):
        with pytest.raises(ValueError, match=r"targets\[0\] is empty or not a string"):
            on_topic_contexts(bad, pool, model)
    assert on_topic_contexts([], pool, model) == []


def test_train_sts_in_context_with_lora_saves_adapter_and_merged_model(tmp_path, tiny_model_dir, sts_jsonl):
    pytest.importorskip("peft")
    from sentence_transformers import SentenceTransformer

    config = TrainConfig(
        output_dir=str(tmp_path / "run"), model=tiny_model_dir, sts_data=[sts_jsonl], dev_path=DEV, dev_select="even",
        max_steps=4, batch_size=4, learning_rate=1e-2, eval_steps=2, save_steps=2, logging_steps=1, eval_max_span=6, lora_r=4,
    )
    model = train(config)
    final, adapter = tmp_path / "run" / "final", tmp_path / "run" / "adapter"
    assert sorted(os.listdir(adapter)) == ["README.md", "adapter_config.json", "adapter_model.safetensors"] or \
        {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(adapter))
    assert not json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"].startswith("/")
    loaded = SentenceTransformer(str(final))  # merged: a plain checkpoint
    assert not has_adapters(loaded)
    text = ["Later a man played the guitar on stage."]
    assert abs(loaded.encode(text) - model.encode(text)).max() < 1e-4
    base = slice_st.load_model(tiny_model_dir)
    assert abs(loaded.encode(text) - base.encode(text)).max() > 1e-6  # the adapter changed something


def test_dev_select_and_lora_options_are_checked(tmp_path, tiny_model_dir, sts_jsonl):
    with pytest.raises(ValueError, match="dev_select"):
        TrainConfig(output_dir=str(tmp_path), sts_data=[sts_jsonl], dev_select="half").validate()
    with pytest.raises(ValueError, match="lora_r"):
        TrainConfig(output_dir=str(tmp_path), sts_data=[sts_jsonl], lora_r=-1).validate()
    assert TrainConfig(output_dir=str(tmp_path), sts_data=[sts_jsonl]).objectives == ("sts",)
