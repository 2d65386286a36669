"""``python -m research.train``: slice-st train on the paper's offline data, and the recipes' argument files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import slice_st.training.trainer as trainer_module
from research.train import RECIPES, main, offline_datasets
from slice_st.training import train, training_arguments

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SHARED = ROOT.parent / "shared" / "data"
DEV = str(FIXTURES / "stsb_context_sample.tsv")
SENTENCES = [
    "A man is playing a guitar on stage .",
    "Someone plays an acoustic guitar .",
    "The stock market fell sharply on Monday .",
    "Two dogs run across a snowy field .",
    "A woman slices onions in the kitchen .",
    "Children are swimming in a lake .",
]


@pytest.fixture
def shared_data(tmp_path) -> Path:
    """A data folder laid out as the shared one, a few rows per file."""
    folder = tmp_path / "data"
    for path, text in {
        "stsbenchmark/sts-train.csv": (FIXTURES / "sts_sample.csv").read_text(encoding="utf-8"),
        "sick/SICK.txt": "pair_ID\tsentence_A\tsentence_B\trelatedness_score\n"
        + "".join(f"{i}\t{SENTENCES[i]}\t{SENTENCES[i + 1]}\t4.5\n" for i in range(4)),
        "snli/snli_dev_triplets.tsv": "anchor\tpositive\tnegative\n"
        + "\t".join(SENTENCES[:3])
        + "\n",
        "snli/snli_test_triplets.tsv": "anchor\tpositive\tnegative\n"
        + "\t".join(SENTENCES[3:])
        + "\n",
        "pearl_eval/ppdb/ppdb_filtered.json": json.dumps([["very hard", "really hard", "pos"]]),
        "nugget_pi/paraphrase_identification/train/docs.txt": "d1\t" + " ".join(SENTENCES) + "\n",
        **{
            f"snli/{name}": "\n".join(SENTENCES) + "\n"
            for name in ("s1.dev", "s2.dev", "s1.test", "s2.test")
        },
    }.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    shutil.copy(FIXTURES / "sts_sample.csv", folder / "stsbenchmark" / "sts-dev.csv")
    return folder


def test_offline_datasets_follow_the_recipe_and_keep_dev_sentences_out(shared_data):
    values = json.loads((Path(RECIPES) / "cpu-minilm-both.json").read_text())
    _, settings = training_arguments(
        output_dir="x", **{**values, "passage_min_words": 10, "passage_max_words": 30}
    )
    parts = offline_datasets(settings, str(shared_data), seed=1)
    assert list(parts) == ["slice", "distill"] and len(parts["slice"]) and len(parts["distill"])
    assert parts["slice"].column_names == ["anchor", "positive", "negative"]
    dev = [
        line.split("\t")[6].strip()
        for line in (FIXTURES / "sts_sample.csv").read_text().splitlines()
    ]
    assert not any(sentence in text for sentence in dev for text in parts["distill"]["text"])


@pytest.mark.parametrize("name", sorted(path.name for path in Path(RECIPES).glob("*.json")))
def test_recipes_are_slice_st_train_arguments(name, monkeypatch, tmp_path):
    runs = []
    monkeypatch.setattr(
        trainer_module, "train", lambda args, settings, train_dataset: runs.append(train_dataset)
    )
    monkeypatch.setattr(
        "research.train.offline_datasets", lambda settings, folder, seed: {"distill": folder}
    )
    config = str(Path(RECIPES) / name)
    assert (
        main(
            [
                "--config",
                config,
                "-o",
                str(tmp_path / "run"),
                "--shared-data",
                "DATA",
                "--max-steps",
                "3",
            ]
        )
        == 0
    )
    assert runs == ["DATA"]


def test_offline_without_a_folder_is_one_line(tmp_path, capsys):
    for option in ("--train-data", "--distill-data"):
        with pytest.raises(SystemExit) as info:
            main(["-o", str(tmp_path / "run"), option, "offline"])
        assert info.value.code == 2
        assert "give offline:DIR or --shared-data DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["-o", str(tmp_path / "run"), "--distill-data", "notes.txt", "--shared-data", "DATA"])
    assert "train on your own with slice-st train" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.exists(), reason="needs the shared data sets next to the repository")
def test_real_minilm_trains_on_offline_triplets(tmp_path):
    """all-MiniLM-L6-v2, 20 steps on triplets built from the shared data: finite loss, a loadable checkpoint."""
    from sentence_transformers import SentenceTransformer

    from research.offline_data import offline_training_triplets

    triplets = offline_training_triplets(
        SHARED, dev_path=SHARED / "stsbenchmark" / "sts-dev.csv", limit=200, seed=1
    )
    assert len(triplets) == 200
    config = training_arguments(
        output_dir=str(tmp_path / "run"),
        dev=DEV,
        max_steps=20,
        per_device_train_batch_size=8,
        eval_steps=10,
        save_steps=20,
        logging_steps=5,
        max_seq_length=128,
    )
    train(*config, train_dataset=triplets)
    state = json.loads((tmp_path / "run" / "checkpoint-20" / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert losses and all(loss == loss and loss < 10 for loss in losses)
    model = SentenceTransformer(str(tmp_path / "run" / "final"))
    best = model.best_spans(
        ["a man plays the guitar"], ["Yesterday, a man was playing a guitar on the stage."]
    )[0][0][0]
    assert "guitar" in best.span and best.score > 0.5
