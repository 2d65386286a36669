"""SpanDistillationLoss, span sampling and distillation training (tiny models); the passages builder is in
tests/data/test_passages.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from slice_st import SpanDistillationLoss
from slice_st.config import enable_span_features
from slice_st.spans import sample_spans, span_means
from slice_st.tokens import unit_boundaries
from slice_st.training import SliceArguments, train, training_arguments

FIXTURES = Path(__file__).parents[1] / "fixtures"
DEV = str(FIXTURES / "stsb_context_sample.tsv")

TEXTS = [
    "A man is playing the guitar on a small stage tonight.",
    "Stocks fell.",
    "The committee, after a long debate, approved the new budget for the city's schools.",
    "Hi",
    "Rain again — the match was called off and everyone went home early.",
]


def _batch(model, texts=TEXTS):
    enable_span_features(model)
    return model.preprocess(texts)


# ------------------------------------------------------------------------------------ sampling
@given(
    num_units=st.lists(st.integers(0, 30), min_size=1, max_size=6),
    num_spans=st.integers(1, 12),
    min_span=st.integers(1, 3),
    extra=st.integers(0, 12),
    seed=st.integers(0, 1000),
)
def test_sampled_spans_stay_inside_each_row(num_units, num_spans, min_span, extra, seed):
    units = torch.tensor(num_units)
    starts, ends = sample_spans(
        units, num_spans, min_span, min_span + extra, torch.Generator().manual_seed(seed)
    )
    assert starts.shape == ends.shape == (len(num_units), num_spans)
    for row, count in enumerate(num_units):
        if count < min_span:
            assert (starts[row] == -1).all() and (ends[row] == -1).all()
            continue
        lengths = ends[row] - starts[row]
        assert (starts[row] >= 0).all() and (ends[row] <= count).all()
        assert (lengths >= min_span).all() and (lengths <= min(min_span + extra, count)).all()


def test_sampled_lengths_are_stratified():
    starts, ends = sample_spans(
        torch.tensor([40] * 50), 10, 1, 10, torch.Generator().manual_seed(0)
    )
    for row in range(50):  # ten draws over ten lengths: each length exactly once
        assert sorted((ends[row] - starts[row]).tolist()) == list(range(1, 11))


def test_sampling_is_reproducible_and_rejects_bad_counts():
    a = sample_spans(torch.tensor([12, 7]), 5, 1, 6, torch.Generator().manual_seed(4))
    b = sample_spans(torch.tensor([12, 7]), 5, 1, 6, torch.Generator().manual_seed(4))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="num_spans"):
        sample_spans(torch.tensor([3]), 0, 1, 2)


# ------------------------------------------------------------------------------------ the loss
def test_loss_is_zero_when_student_and_teacher_agree(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    loss = SpanDistillationLoss(model, spans_per_text=6, max_span=5, seed=0)
    features = _batch(model)
    with torch.no_grad():
        out = model(dict(features))
        units = unit_boundaries(
            features["attention_mask"],
            features["special_tokens_mask"],
            features["offset_mapping"],
            "word",
        )
        starts, ends = sample_spans(units.num_units, 6, 1, 5, torch.Generator().manual_seed(1))
        means, _ = span_means(out["token_embeddings"], units.boundaries, starts, ends)
    labels = torch.zeros(len(TEXTS), 7, 2 + model.get_embedding_dimension())
    labels[:, 0, 2:] = out["sentence_embedding"]
    labels[:, 1:, 0], labels[:, 1:, 1], labels[:, 1:, 2:] = starts, ends, means
    parts = loss([features], labels)
    assert float(parts["span"]) == pytest.approx(0.0, abs=1e-5)
    assert float(parts["text"]) == pytest.approx(0.0, abs=1e-5)
    mse = SpanDistillationLoss(model, spans_per_text=6, max_span=5, metric="mse")
    assert float(sum(mse([features], labels).values())) == pytest.approx(0.0, abs=1e-8)
    labels[:, 1:, 2:] += 1.0  # disagreeing teacher: positive loss
    assert float(mse([features], labels)["span"]) > 0.5


def test_teacher_vectors_are_the_spans_encoded_alone(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    loss = SpanDistillationLoss(model, spans_per_text=8, max_span=6, seed=0)
    assert loss._ids_path  # same WordPiece tokenizer: span ids cut from the batch
    features = _batch(model)
    units = unit_boundaries(
        features["attention_mask"],
        features["special_tokens_mask"],
        features["offset_mapping"],
        "word",
        TEXTS,
    )
    starts, ends = sample_spans(units.num_units, 8, 1, 6, torch.Generator().manual_seed(2))
    with torch.no_grad():
        spans, texts = loss._teacher_vectors(dict(features), units.boundaries, starts, ends)
    rows, columns = torch.nonzero(starts >= 0, as_tuple=True)
    strings = [
        TEXTS[r][int(units.char_starts[r, starts[r, c]]) : int(units.char_ends[r, ends[r, c] - 1])]
        for r, c in zip(rows.tolist(), columns.tolist())
    ]
    expected = loss.teacher.encode(strings, convert_to_tensor=True)
    assert torch.allclose(spans[rows, columns], expected, atol=1e-5)
    assert torch.allclose(texts, loss.teacher.encode(TEXTS, convert_to_tensor=True), atol=1e-5)
    assert not spans[
        starts < 0
    ].any()  # "Hi" has one word: spans of it exist; missing ones are zero
    loss._ids_path = False  # the decode path (teachers with another tokenizer) sees the same strings here (uncased)
    with torch.no_grad():
        decoded, _ = loss._teacher_vectors(dict(features), units.boundaries, starts, ends)
    assert torch.allclose(decoded, spans, atol=1e-5)


def test_gradients_reach_only_the_student_and_the_teacher_stays_frozen(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    loss = SpanDistillationLoss(model, spans_per_text=4, max_span=4, seed=0)
    loss.train()
    assert not loss.teacher.training and all(not p.requires_grad for p in loss.teacher.parameters())
    before = [p.detach().clone() for p in loss.teacher.parameters()]
    optimizer = torch.optim.SGD([p for p in loss.parameters() if p.requires_grad], lr=1.0)
    model.train()
    total = sum(loss([_batch(model)]).values())
    total.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert all(p.grad is None for p in loss.teacher.parameters())
    optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, loss.teacher.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_cached_teacher_vectors_give_the_same_loss(make_tiny_model):
    from datasets import Dataset

    model = enable_span_features(make_tiny_model())
    cached = SpanDistillationLoss(model, spans_per_text=5, max_span=6).cache_teacher_vectors(
        Dataset.from_dict({"text": TEXTS}), batch_size=len(TEXTS), seed=7
    )
    assert cached.column_names == ["text", "label"]
    labels = torch.tensor(cached["label"])
    assert labels.shape == (len(TEXTS), 6, 2 + model.get_embedding_dimension())
    features = _batch(model)
    on_the_fly = SpanDistillationLoss(
        model, spans_per_text=5, max_span=6, seed=7
    )  # same seed: same spans
    with torch.no_grad():
        a = on_the_fly([features])
        b = on_the_fly([features], labels)
    for key in ("span", "text"):
        assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-6)
    # cached spans past the tokenized text are skipped, not read
    shorter = enable_span_features(make_tiny_model(max_seq_length=8))
    clipped = SpanDistillationLoss(shorter, spans_per_text=5, max_span=6)
    clipped([_batch(shorter)], labels)
    assert clipped.skipped_spans > 0


def test_bad_arguments_and_inputs_are_clear_errors(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    with pytest.raises(ValueError, match="metric"):
        SpanDistillationLoss(model, metric="kl")
    with pytest.raises(ValueError, match="spans_per_text"):
        SpanDistillationLoss(model, spans_per_text=0)
    with pytest.raises(ValueError, match="min_span"):
        SpanDistillationLoss(model, min_span=4, max_span=2)
    loss = SpanDistillationLoss(model)
    features = _batch(model)
    with pytest.raises(ValueError, match="one text column"):
        loss([features, features])
    with pytest.raises(ValueError, match="cached labels"):
        loss([features], torch.zeros(len(TEXTS), 3, 5))
    plain = dict(model.tokenizer(TEXTS, padding=True, return_tensors="pt"))
    with pytest.raises(ValueError, match="offsets"):
        loss([plain])
    assert (
        loss.get_config_dict()["metric"] == "cosine"
        and "2405.07263" in loss.citation
        and "contributors" not in loss.citation
    )


def test_empty_texts_give_a_zero_loss_not_nan(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    loss = SpanDistillationLoss(model, seed=0)
    parts = loss([_batch(model, ["", " "])])
    assert float(parts["span"]) == 0.0 and float(parts["text"]) == 0.0


# ------------------------------------------------------------------------------------ training
@pytest.fixture(scope="module")
def passages_dir(tmp_path_factory) -> str:
    from datasets import Dataset

    texts = [
        "It rained all morning. A man played the guitar on stage while people clapped.",
        "Markets dropped sharply on Monday. Nobody had expected the fall.",
        "Two dogs were running after a ball in the park near the river.",
        "The kitchen was warm and a lady was preparing dinner for six guests.",
    ] * 4
    folder = tmp_path_factory.mktemp("passages") / "data"
    Dataset.from_dict({"text": texts}).save_to_disk(str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def triplets_dir(tmp_path_factory) -> str:
    from datasets import Dataset

    rows = {
        "anchor": ["plays the guitar", "stock prices fell"] * 4,
        "positive": [
            "It rained. A man played the guitar on stage.",
            "On Monday the markets dropped sharply.",
        ]
        * 4,
        "negative": ["The cat sleeps all day.", "Tea is served at five."] * 4,
    }
    folder = tmp_path_factory.mktemp("triplets") / "data"
    Dataset.from_dict(rows).save_to_disk(str(folder))
    return str(folder)


@pytest.mark.parametrize("objective", ["distill", "both"])
def test_training_with_distillation_alone_and_mixed(
    tmp_path, tiny_model_dir, passages_dir, triplets_dir, objective, capsys
):
    args, config = training_arguments(
        output_dir=str(tmp_path / "run"),
        model=tiny_model_dir,
        distill_data=[passages_dir],
        train_data=[triplets_dir] if objective == "both" else [],
        dev=DEV,
        sts_dev=str(FIXTURES / "sts_sample.csv"),
        max_steps=4,
        per_device_train_batch_size=4,
        eval_steps=2,
        save_steps=2,
        logging_steps=1,
        distill_spans=4,
        distill_max_span=5,
        cache_teacher=objective == "distill",
    )
    assert config.objectives == (("slice", "distill") if objective == "both" else ("distill",))
    model = train(args, config)
    final = tmp_path / "run" / "final"
    assert (final / "config.json").exists()
    saved = json.loads((final / "slice_train_config.json").read_text())
    assert saved["distill_data"] == [passages_dir]
    assert "trained to step 4" in capsys.readouterr().err
    state = json.loads(next((tmp_path / "run").glob("checkpoint-*/trainer_state.json")).read_text())
    logged = {key for entry in state["log_history"] for key in entry}
    assert "eval_dev_single_spearman" in logged and "eval_sts-dev_spearman_cosine" in logged
    assert model is not None


def test_distillation_cli_args_and_checks(monkeypatch, passages_dir, triplets_dir):
    import slice_st.training.trainer as trainer_module
    from slice_st.cli import main

    runs = []
    monkeypatch.setattr(
        trainer_module, "train", lambda args, settings, **more: runs.append((args, settings))
    )
    argv = [
        "train",
        "-o",
        "x",
        "--train-data",
        triplets_dir,
        "--distill-data",
        passages_dir,
        "--distill-weight",
        "0.5",
    ]
    assert main([*argv, "--cache-teacher", "--multi-dataset-batch-sampler", "proportional"]) == 0
    args, config = runs[0]
    assert config.objectives == ("slice", "distill")
    assert config.distill_weight == 0.5 and config.cache_teacher
    assert args.multi_dataset_batch_sampler == "proportional"
    with pytest.raises(ValueError, match="MultiDatasetBatchSamplers"):
        training_arguments(output_dir="x", distill_data=["x"], multi_dataset_batch_sampler="zigzag")
    with pytest.raises(ValueError, match="distill-data"):
        SliceArguments().check(training_arguments(output_dir="x")[0])


def test_lora_distillation_saves_the_adapter_and_a_merged_model(
    tmp_path, tiny_model_dir, passages_dir
):
    pytest.importorskip("peft")
    import os

    from sentence_transformers import SentenceTransformer

    import slice_st
    from slice_st.loading import has_adapters

    args, config = training_arguments(
        output_dir=str(tmp_path / "run"),
        model=tiny_model_dir,
        distill_data=[passages_dir],
        dev=DEV,
        dev_select="even",
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        eval_steps=2,
        save_steps=2,
        logging_steps=1,
        eval_max_span=6,
        lora_r=4,
        distill_spans=4,
        distill_max_span=5,
    )
    model = train(args, config)
    final, adapter = tmp_path / "run" / "final", tmp_path / "run" / "adapter"
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(adapter))
    assert not json.loads((adapter / "adapter_config.json").read_text())[
        "base_model_name_or_path"
    ].startswith("/")
    loaded = SentenceTransformer(str(final))  # merged: a plain checkpoint
    assert not has_adapters(loaded)
    text = ["Later a man played the guitar on stage."]
    assert abs(loaded.encode(text) - model.encode(text)).max() < 1e-4
    assert (
        abs(loaded.encode(text) - slice_st.load_model(tiny_model_dir).encode(text)).max() > 1e-6
    )  # the adapter changed something


def test_dev_select_and_lora_are_checked(tmp_path):
    args = training_arguments(output_dir=str(tmp_path))[0]
    with pytest.raises(ValueError, match="dev_select"):
        SliceArguments(distill_data=["x"], dev_select="half").check(args)
    with pytest.raises(ValueError, match="lora_r"):
        SliceArguments(distill_data=["x"], lora_r=-1).check(args)


def test_experiment_fields_and_options_are_gone():
    import dataclasses

    from slice_st.cli import build_parser

    fields = {item.name for item in dataclasses.fields(SliceArguments)}
    assert not fields & {
        "sts_data",
        "sts_weight",
        "sts_scale",
        "sts_limit",
        "distill_phrase_weight",
        "distill_vector_weight",
    }
    for option in ("--sts-data", "--distill-phrase-weight", "--distill-vector-weight"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["train", "-o", "x", option, "1"])


def test_sampled_spans_cover_only_real_tokens_of_a_padded_batch(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    features = _batch(model)
    units = unit_boundaries(
        features["attention_mask"],
        features["special_tokens_mask"],
        features["offset_mapping"],
        "word",
    )
    starts, ends = sample_spans(units.num_units, 16, 1, 8, torch.Generator().manual_seed(3))
    content = features["attention_mask"].bool() & ~features["special_tokens_mask"].bool()
    for row, column in zip(*torch.nonzero(starts >= 0, as_tuple=True)):
        lo = int(units.boundaries[row, starts[row, column]])
        hi = int(units.boundaries[row, ends[row, column]])
        assert hi > lo and bool(
            content[row, lo:hi].all()
        )  # no padding, no [CLS]/[SEP] inside a span


def test_legacy_fit_labels_are_ignored(make_tiny_model):
    model = enable_span_features(make_tiny_model())
    features = _batch(model)
    a = SpanDistillationLoss(model, spans_per_text=4, seed=5)(
        [features], torch.zeros(len(TEXTS))
    )  # model.fit's dummy labels
    b = SpanDistillationLoss(model, spans_per_text=4, seed=5)([features])
    assert float(a["span"]) == pytest.approx(float(b["span"]))
    with pytest.raises(ValueError, match="cached labels"):
        SpanDistillationLoss(model)([features], torch.zeros(len(TEXTS), 4))


def test_legacy_model_fit_trains_the_student_only(make_tiny_model):
    from sentence_transformers import InputExample
    from torch.utils.data import DataLoader

    model = enable_span_features(make_tiny_model())
    loss = SpanDistillationLoss(model, spans_per_text=4, max_span=5, seed=0)
    student_before = [p.detach().clone() for p in model.parameters()]
    teacher_before = [p.detach().clone() for p in loss.teacher.parameters()]
    examples = [InputExample(texts=[text]) for text in TEXTS]
    model.fit(
        train_objectives=[(DataLoader(examples, batch_size=3), loss)],
        epochs=1,
        warmup_steps=0,
        optimizer_params={"lr": 1e-3},
        show_progress_bar=False,
    )
    assert any(not torch.equal(a, b) for a, b in zip(student_before, model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(teacher_before, loss.teacher.parameters()))
