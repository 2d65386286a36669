"""slice_st.card: the SLICE model card of the shipped model, of fit/Trainer runs and of user models."""

from __future__ import annotations

import difflib
import json

import pytest

import slice_st
from slice_st.config import enable_span_features


def test_saving_the_shipped_model_writes_its_own_card(tmp_path):

    model = slice_st.load_model()
    card = model.model_card_data
    assert (card.license, card.base_model) == (
        "cc-by-sa-4.0",
        "sentence-transformers/all-MiniLM-L6-v2",
    )
    slice_st.save_slice_model(model, str(tmp_path / "saved"))
    text = (tmp_path / "saved" / "README.md").read_text()
    head = text.split("---")[1]
    assert (
        "license: cc-by-sa-4.0" in head and "license: apache-2.0" not in head
    )  # not the base model's card
    assert (
        "base_model: sentence-transformers/all-MiniLM-L6-v2" in head
        and "# all-MiniLM-L6-v2\n" not in text
    )
    assert "# slice-minilm" in text and "slice-st" in head
    reloaded = slice_st.load_model(str(tmp_path / "saved"))
    assert reloaded.encode("a test").shape == (384,)


def test_a_trainer_card_of_the_shipped_model_names_base_and_licence(tmp_path):
    """The SentenceTransformerTrainer renders the card from the same model_card_data: no "Base model: Unknown", no
    missing licence."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    model = slice_st.load_model()
    data = Dataset.from_dict(
        {
            "anchor": ["a dog runs", "a cat sleeps"],
            "positive": ["the dog is running", "the cat is asleep"],
        }
    )
    args = SentenceTransformerTrainingArguments(
        str(tmp_path / "run"),
        max_steps=1,
        per_device_train_batch_size=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    SentenceTransformerTrainer(
        model=model, args=args, train_dataset=data, loss=MultipleNegativesRankingLoss(model)
    ).train()
    slice_st.save_slice_model(model, str(tmp_path / "out"))
    text = (tmp_path / "out" / "README.md").read_text()
    head = text.split("---")[1]
    assert (
        "license: cc-by-sa-4.0" in head
        and "base_model: sentence-transformers/all-MiniLM-L6-v2" in head
    )
    assert (
        "**Base model:** [sentence-transformers/all-MiniLM-L6-v2]" in text
        and "- **License:** cc-by-sa-4.0" in text
    )


def _slice_card_checks(text: str, license: str, loss: str) -> None:
    head = text.split("---")[1]
    assert (
        f"license: {license}" in head
        and "base_model: sentence-transformers/all-MiniLM-L6-v2" in head
    )
    assert (
        "## SLICE: span embeddings for phrase mining" in text and "Span-Aggregatable" in text
    )  # the SLICE section
    assert (
        f"- **Loss:** `{loss}`" in text and "2405.07263" in text
    )  # the loss that trained it, the citation
    assert "Base model:** Unknown" not in text and "slice-st" in head


_TRIPLETS = {
    "anchor": ["a dog runs", "a cat sleeps"],
    "positive": [
        "Yesterday the dog was running in the park.",
        "At noon the cat was asleep on the sofa.",
    ],
    "negative": ["The bank closes at five.", "Prices rose again this month."],
}


@pytest.mark.parametrize("how", ["fit", "trainer"])
def test_fit_and_trainer_cards_carry_the_slice_section(tmp_path, how):
    """One card path: a SLICE loss makes the model's card a SLICE card, so model.fit() and a user's own
    SentenceTransformerTrainer write the SLICE section (span settings, the loss, the citation), with the base model and
    licence the embedded base already named (before: no SLICE section; "Base model: Unknown" and no licence for the
    embedded base)."""
    from datasets import Dataset
    from sentence_transformers import (
        InputExample,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from torch.utils.data import DataLoader

    from slice_st.losses import SpanMaxCrossEntropyLoss

    model = enable_span_features(slice_st.load_model("base"))
    loss = SpanMaxCrossEntropyLoss(model, max_span=6)
    if how == "fit":
        examples = [InputExample(texts=list(row)) for row in zip(*_TRIPLETS.values())]
        model.fit(
            train_objectives=[(DataLoader(examples, batch_size=2), loss)],
            epochs=1,
            show_progress_bar=False,
        )
    else:
        args = SentenceTransformerTrainingArguments(
            str(tmp_path / "run"),
            max_steps=1,
            per_device_train_batch_size=2,
            report_to=[],
            save_strategy="no",
        )
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=Dataset.from_dict(_TRIPLETS), loss=loss
        )
        trainer.train()
    model.save(str(tmp_path / "plain"))  # sentence-transformers' own save
    slice_st.save_slice_model(model, str(tmp_path / "out"))
    for folder in ("plain", "out"):
        text = (tmp_path / folder / "README.md").read_text()
        _slice_card_checks(text, "apache-2.0", "SpanMaxCrossEntropyLoss")
        span = slice_st.get_span_config(model)
        assert f"every span of {span.min_span}..{span.max_span} {span.unit}s" in text
        assert '"max_span": 6' in text and str(tmp_path) not in text


def test_the_shipped_model_has_its_slice_card_from_load(tmp_path):
    """load_model() gives slice-minilm its SLICE card at load (recipe, licence, base model), so an untrained save
    writes the same section the trainer writes (before: a card without the SLICE section)."""
    from slice_st.card import SliceModelCardData

    model = slice_st.load_model()
    card = model.model_card_data
    assert (
        isinstance(card, SliceModelCardData)
        and card.shipped_name == "slice-minilm"
        and card.model_id is None
    )
    assert card.slice_section["steps"] == 800 and card.slice_section["lora"] == {
        "r": 16,
        "alpha": 32,
    }
    slice_st.save_slice_model(model, str(tmp_path / "saved"))
    model.save(
        str(tmp_path / "plain")
    )  # sentence-transformers' own save: the same card, not the base's README
    for folder in ("saved", "plain"):
        text = (tmp_path / folder / "README.md").read_text()
        _slice_card_checks(text, "cc-by-sa-4.0", "SpanDistillationLoss")
        assert (
            "Trained on share-alike data" in text and "SICK" not in text and "ParaBank" not in text
        )
        assert (
            'SentenceTransformer("sentence_transformers_model_id")' in text
        )  # not by the shipped name: no id yet


def test_the_shipped_model_keeps_the_options_it_was_loaded_with():
    """load_model() options reach the shipped model (it is rebuilt over the base's modules for its own card)."""

    model = slice_st.load_model(
        truncate_dim=32, prompts={"query": "query: "}, similarity_fn_name="dot"
    )
    assert model.encode("a test").shape == (32,) and model.prompts["query"] == "query: "
    assert (
        model.similarity_fn_name == "dot" and model.model_card_data.shipped_name == "slice-minilm"
    )
    assert model.best_spans(["a test"], ["This is a test of the span search."])[0][0][0].span


def test_a_user_model_card_keeps_what_it_said(tiny_model_dir, tmp_path):
    """A trainer with SLICE losses (sentence-transformers' card callback hands them to the card) turns the card into a
    SLICE card without losing what it said (licence, language, model id, tags), and a teacher given as a local path
    is never named in the card."""
    from datasets import Dataset, DatasetDict
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    from slice_st.card import SliceModelCardData
    from slice_st.losses import SpanDistillationLoss, SpanMaxCrossEntropyLoss

    model = enable_span_features(slice_st.load_model(tiny_model_dir))
    model.model_card_data.license = "mit"
    model.model_card_data.add_tags("my-tag")
    assert (
        isinstance(model.model_card_data, SliceModelCardData)
        and not model.model_card_data.slice_section
    )
    losses = {
        "a": SpanMaxCrossEntropyLoss(model),
        "b": SpanMaxCrossEntropyLoss(model),  # listed once per loss class
        "c": SpanDistillationLoss(model, teacher=tiny_model_dir),
    }
    data = DatasetDict({name: Dataset.from_dict(_TRIPLETS) for name in ("a", "b")})
    data["c"] = Dataset.from_dict({"text": _TRIPLETS["positive"]})
    args = SentenceTransformerTrainingArguments(
        str(tmp_path / "run"), report_to=[], save_strategy="no"
    )
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=losses)
    card = model.model_card_data
    assert card.license == "mit" and "my-tag" in card.tags and "slice-st" in card.tags
    names = [entry["name"] for entry in card.slice_section["losses"]]
    assert names == ["SpanMaxCrossEntropyLoss", "SpanDistillationLoss"]
    assert tiny_model_dir not in json.dumps(card.slice_section)
    assert card.model is model


@pytest.mark.parametrize("loss_name", ["SpanMaxCrossEntropyLoss", "SpanDistillationLoss"])
@pytest.mark.parametrize("shipped", [True, False])
def test_building_a_loss_leaves_the_model_alone(tiny_model_dir, loss_name, shipped):
    """As sentence-transformers' losses: the tokenizer settings and the card data are what they were."""
    import copy

    from slice_st import losses

    model = slice_st.load_model(None if shipped else tiny_model_dir)
    loss_class = getattr(losses, loss_name)
    with pytest.raises(
        slice_st.SpanInputError, match=r"enable_span_features\(model\) before building the loss"
    ):
        loss_class(model)  # a clear error, nothing changed
    enable_span_features(model)
    card, kwargs = model.model_card_data, copy.deepcopy(model[0].processing_kwargs)
    before = json.dumps(vars(card), default=repr, sort_keys=True)
    loss_class(model, max_span=4)
    assert model.model_card_data is card and model[0].processing_kwargs == kwargs
    assert json.dumps(vars(card), default=repr, sort_keys=True) == before


def test_an_untrained_model_loaded_by_load_model_keeps_sentence_transformers_card(
    tiny_model_dir, tmp_path
):
    """load_model gives a SliceModelCardData that renders as sentence-transformers' own until a SLICE loss trains."""
    from sentence_transformers import SentenceTransformer

    slice_st.load_model(tiny_model_dir).save(str(tmp_path / "a"))
    SentenceTransformer(tiny_model_dir).save(str(tmp_path / "b"))
    ours, theirs = ((tmp_path / name / "README.md").read_text().splitlines() for name in "ab")
    assert ours == theirs, "\n".join(
        difflib.unified_diff(theirs, ours, "sentence-transformers", "load_model", lineterm="")
    )


def test_loading_the_shipped_model_warns_of_nothing(caplog):
    """The card keeps the shipped name as model_id without sentence-transformers' warning about an id without an
    organisation (it would print on every load_model())."""
    import logging

    from slice_st.losses import SpanMaxCrossEntropyLoss

    with caplog.at_level(logging.WARNING):
        model = enable_span_features(slice_st.load_model())
        SpanMaxCrossEntropyLoss(model)
    assert model.model_card_data.shipped_name == "slice-minilm"
    assert not [record for record in caplog.records if "model_id" in record.getMessage()]
