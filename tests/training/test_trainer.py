"""slice-st train: end to end on a tiny model, resume after a real kill, Hub pushes (to the test Hub,
tests/hub_server.py, with the real client), model card, accelerate."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest
from helpers import cli_error, file_tree

import slice_st
from slice_st.card import apply_model_card
from slice_st.cli import main
from slice_st.training import PRESETS, train, training_arguments

FIXTURES = Path(__file__).parents[1] / "fixtures"
DEV = str(FIXTURES / "stsb_context_sample.tsv")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def triplets_dir(tmp_path_factory) -> str:
    from datasets import Dataset

    rows = {
        "anchor": ["plays the guitar", "stock prices fell", "a dog runs", "a woman cooks"] * 4,
        "positive": [
            "It rained. A man played the guitar on stage. People clapped.",
            "Nobody expected it. On Monday the markets dropped sharply.",
            "In the park two dogs were running after a ball.",
            "The kitchen was warm. A lady is preparing dinner for six.",
        ]
        * 4,
        "negative": [
            "The cat sleeps all day.",
            "A woman is cooking rice.",
            "Tea is served at five.",
            "Trains were late.",
        ]
        * 4,
    }
    folder = tmp_path_factory.mktemp("triplets") / "data"
    Dataset.from_dict(rows).save_to_disk(str(folder))
    return str(folder)


def _config(tmp_path, tiny_model_dir, triplets_dir, **overrides):
    """``(training arguments, SLICE settings)`` of a tiny run."""
    values = dict(
        output_dir=str(tmp_path / "run"),
        model=tiny_model_dir,
        train_data=[triplets_dir],
        dev=DEV,
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        eval_steps=2,
        save_steps=2,
        logging_steps=1,
        max_span=4,
        eval_max_span=6,
    )
    values.update(overrides)
    return training_arguments(**values)


def test_train_end_to_end_with_evaluator_and_checkpoints(tmp_path, tiny_model_dir, triplets_dir):
    """Checkpoints within the limit, the dev evaluator's metric in the trainer state, the best model in final/."""
    from sentence_transformers import SentenceTransformer

    config = _config(tmp_path, tiny_model_dir, triplets_dir)
    train(*config)
    run = Path(config[0].output_dir)
    checkpoints = sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint-"))
    assert checkpoints and len(checkpoints) <= config[0].save_total_limit
    state = json.loads((run / checkpoints[-1] / "trainer_state.json").read_text())
    assert any("eval_dev_single_spearman" in entry for entry in state["log_history"])
    assert state["best_metric"] is not None
    assert not any(p.name.startswith("_final") for p in run.iterdir())

    loaded = SentenceTransformer(str(run / "final"))  # no trust flag
    assert slice_st.get_span_config(loaded) == slice_st.config.SpanConfig(1, 6, "word")
    assert loaded.encode_spans("A man plays the guitar.").embeddings.shape[1] == 32


def test_cli_says_where_the_model_went(tmp_path, tiny_model_dir, triplets_dir, capsys):
    """``slice-st train`` ends with the final model's folder and the checkpoint it is, as the trainer state says."""
    argv = _train_command(tmp_path, tiny_model_dir, triplets_dir)[4:]  # the options, run in-process
    assert main(["train", *argv]) == 0
    run = tmp_path / "run"
    last = sorted(run.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))[-1]
    state = json.loads((last / "trainer_state.json").read_text())
    said = capsys.readouterr().out.strip().splitlines()[-1]
    if state["best_model_checkpoint"] is not None:
        best = (
            f"{state['best_model_checkpoint']}: eval_dev_single_spearman {state['best_metric']:.4f}"
        )
        assert said == f"saved {run / 'final'} (the best checkpoint, {best})"
        assert Path(state["best_model_checkpoint"]).is_dir()
    else:  # the tiny random model's dev score before training was never beaten
        assert said.startswith(
            f"saved {run / 'final'} (the last step's model; no checkpoint beat the dev score"
        )
    assert (run / "final" / "config.json").is_file()


def test_where_the_model_went_names_the_checkpoint_and_the_hub_url(monkeypatch):
    from huggingface_hub import constants
    from transformers import TrainerState

    from slice_st.cli.train import where_the_model_went

    args, _ = training_arguments(output_dir="runs/x", push_to_hub=True, hub_model_id="org/name")
    best = TrainerState(
        best_model_checkpoint="runs/x/checkpoint-20", best_metric=0.61234, best_global_step=20
    )
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:8990")
    assert where_the_model_went(args, best, "eval_dev_single_spearman") == [
        "saved runs/x/final (the best checkpoint, runs/x/checkpoint-20: eval_dev_single_spearman 0.6123)",
        "pushed to http://127.0.0.1:8990/org/name",
    ]
    args, _ = training_arguments(output_dir="runs/x")
    assert where_the_model_went(args, TrainerState()) == [
        "saved runs/x/final"
    ]  # no dev set: the last step's
    start = TrainerState(best_metric=0.5, best_global_step=0)
    assert where_the_model_went(args, start, "eval_dev_single_spearman") == [
        "saved runs/x/final (the last step's model; no checkpoint beat the dev score before training, 0.5000)"
    ]


def _train_command(tmp_path, tiny_model_dir, triplets_dir, *extra: str) -> list[str]:
    return _cli(
        "-o", str(tmp_path / "run"), "-m", tiny_model_dir, "--train-data", triplets_dir, "--dev", DEV, "--max-steps",
        "4", "--per-device-train-batch-size", "4", "--learning-rate", "1e-3", "--eval-steps", "2", "--save-steps", "2",
        "--logging-steps", "1", "--max-span", "4", "--eval-max-span", "6", "--no-progress", *extra,
    )  # fmt: skip


@pytest.mark.slow
def test_train_pushes_checkpoints_and_the_final_model_to_the_hub(
    tmp_path, tiny_model_dir, triplets_dir, hub
):
    """``slice-st train --push-to-hub`` against the test Hub with the real client: the trainer's every_save pushes and
    the final push are the repository's commits, its README is the SLICE card (the local one), and the repository
    loads by its id with plain sentence-transformers in a new process."""
    from helpers import hub_env, hub_file, hub_json

    done = subprocess.run(
        _train_command(
            tmp_path, tiny_model_dir, triplets_dir, "--push-to-hub", "--hub-model-id", "org/slice-tiny",
            "--hub-private-repo", "true",
            "--hub-always-push", "true",  # else a save's push is skipped while the last one runs: speed-dependent
        ),
        env=hub_env(hub, tmp_path / "home"), cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"pushed to {hub.rstrip('/')}/org/slice-tiny"
    titles = [commit["title"] for commit in hub_json(hub, "api/models/org/slice-tiny/commits/main")]
    assert titles[0] == "Final SLICE model" and titles[-1] == "initial commit"
    # Each save's push is a background upload whose failure transformers does not report (it waits, never reads the
    # result): on a loaded machine one can be missing, so the saves' pushes are checked as "some, and no other".
    pushed = set(titles[1:-1])
    assert pushed and pushed <= {"Training in progress, step 2", "Training in progress, step 4"}, (
        titles
    )
    assert hub_json(hub, "api/models/org/slice-tiny")["private"] is True
    with pytest.raises(urllib.error.HTTPError, match="401"):
        hub_file(hub, "org/slice-tiny", "README.md", token=None)  # private: no token, no repository
    files = {
        sibling["rfilename"] for sibling in hub_json(hub, "api/models/org/slice-tiny")["siblings"]
    }
    assert {"modules.json", "config.json", "model.safetensors", "README.md"} <= files
    assert not any(name.startswith(("final/", "checkpoint-", "_final")) for name in files)
    assert "optimizer.pt" not in files
    card = hub_file(hub, "org/slice-tiny", "README.md").decode()
    assert (
        "Span-Aggregatable, Contextualized Word Embeddings" in card
        and "Late-Interaction" not in card
    )
    assert 'SentenceTransformer("org/slice-tiny")' in card and str(tmp_path) not in card
    assert "dev_single_spearman" in card and "model-index" in card and "\n\n\n" not in card
    local = (tmp_path / "run" / "final" / "README.md").read_text(encoding="utf-8")
    assert _front_matter(local) == _front_matter(
        card
    )  # one card path: the same metadata locally and on the Hub
    modules = json.loads(hub_file(hub, "org/slice-tiny", "modules.json"))
    assert all(entry["type"].startswith("sentence_transformers.") for entry in modules)


@pytest.mark.slow
def test_lora_run_pushes_the_merged_model(tmp_path, tiny_model_dir, triplets_dir, hub):
    """A LoRA run pushes once, at the end, the merged model: plain weights, never the adapter."""
    pytest.importorskip("peft")
    from helpers import hub_env, hub_json

    done = subprocess.run(
        _train_command(
            tmp_path, tiny_model_dir, triplets_dir, "--push-to-hub", "--hub-model-id", "org/slice-tiny-lora",
            "--lora-r", "4",
        ),
        env=hub_env(hub, tmp_path / "home"), cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    titles = [
        commit["title"] for commit in hub_json(hub, "api/models/org/slice-tiny-lora/commits/main")
    ]
    assert titles == ["Final SLICE model", "initial commit"]
    files = {
        sibling["rfilename"]
        for sibling in hub_json(hub, "api/models/org/slice-tiny-lora")["siblings"]
    }
    assert (
        "model.safetensors" in files and "adapter_model.safetensors" not in files
    )  # merged weights
    assert (
        tmp_path / "run" / "adapter" / "adapter_model.safetensors"
    ).exists()  # the adapter stays local


def _front_matter(card: str) -> dict:
    import yaml

    return yaml.safe_load(card.split("---", 2)[1])


def test_local_card_is_the_slice_card(tmp_path, tiny_model_dir, triplets_dir):
    """A local run's final/README.md is the SLICE card (not the generic sentence-transformers one), with no local
    paths."""
    config = _config(tmp_path, tiny_model_dir, triplets_dir, max_steps=2, save_steps=2)
    train(*config)
    card = (Path(config[0].output_dir) / "final" / "README.md").read_text(encoding="utf-8")
    meta = _front_matter(card)
    assert (
        meta["language"] == ["en"] and meta["license"] == "other"
    )  # a local dataset: its licence is unknown here
    assert {"slice-st", "phrase-mining", "sentence-transformers"} <= set(meta["tags"])
    assert (
        "## SLICE: span embeddings for phrase mining" in card
        and "Span-Aggregatable, Contextualized Word Embeddings" in card
    )
    assert (
        "SpanMaxCrossEntropyLoss" in card and "your own data" in card and "check the terms" in card
    )
    assert str(tmp_path) not in card and "offline:" not in card
    assert "# SLICE span embeddings" in card  # the model name, not "SentenceTransformer"


def test_model_card_content(tiny_model_dir):
    model = slice_st.load_model(tiny_model_dir)
    slice_st.set_span_config(model, max_span=12)
    config = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "train_data": ["paper:/somewhere/shared/data"],
        "max_steps": 300,
        "scale": 20.0,
    }
    from sentence_transformers.base.model_card import generate_model_card

    apply_model_card(model, config, repo_id="org/slice-minilm")
    card = generate_model_card(model)
    meta = _front_matter(card)
    assert (
        meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
        and meta["library_name"] == "sentence-transformers"
    )
    assert (
        meta["license"] == "cc-by-nc-sa-4.0"
    )  # SICK is CC BY-NC-SA: never Apache-2.0 for these weights
    assert {"stanfordnlp/snli", "sentence-transformers/stsb"} <= set(meta["datasets"]) and meta[
        "language"
    ] == ["en"]
    assert "RobZamp/sick" in meta["datasets"]  # SICK is used (the paper's set): listed too
    assert "1..12 words" in card and "**Steps:** 300" in card and '"scale": 20.0' in card
    assert "SICK: CC BY-NC-SA 3.0" in card and "non-commercial" in card and "/somewhere" not in card
    assert "trust_remote_code" in card and "encode_spans" in card and "2405.07263" in card
    assert 'SentenceTransformer("org/slice-minilm")' in card and "Late-Interaction" not in card


@pytest.mark.parametrize(
    ("train_data", "distill", "expected"),
    [
        (["msmarco:/x/triples.tsv"], [], "cc-by-nc-sa-4.0"),
        (["paper"], [], "cc-by-nc-sa-4.0"),
        ([], ["paper"], "other"),  # ParaBank states no licence
        (
            ["offline"],
            ["offline:/data"],
            "cc-by-sa-4.0",
        ),  # STS-B and SNLI only: commercial use allowed
        ([], [], "apache-2.0"),  # no SLICE data: the base model's
    ],
)
def test_card_licence_follows_the_training_data(train_data, distill, expected):
    from slice_st.card import card_license, training_sources

    keys = [key for part in training_sources(train_data, distill) for key in part]
    assert card_license(keys, "sentence-transformers/all-MiniLM-L6-v2")[0] == expected


@pytest.mark.parametrize(
    ("env", "repo_id", "message"),
    [
        ({"HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_x"}, "org/slice-tiny", "HF_HUB_OFFLINE=1"),
        ({"HF_HUB_OFFLINE": "0", "HF_TOKEN": ""}, "org/slice-tiny", "no Hugging Face token"),
        ({"HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_read_x"}, "org/slice-tiny", "read-only"),
        ({"HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_x"}, "someone/slice-tiny", "not 'someone'"),
    ],
)
def test_push_is_checked_before_anything_is_trained(
    tmp_path, tiny_model_dir, triplets_dir, monkeypatch, hub, env, repo_id, message
):
    """The check asks the test Hub with the real client (``HfApi`` given the Hub's address, as this test process
    cannot point ``HF_ENDPOINT`` at it once ``huggingface_hub`` is imported)."""
    import huggingface_hub
    import huggingface_hub.constants

    import slice_st.loading
    from slice_st.training.hub import HubAccessError

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", env["HF_HUB_OFFLINE"] == "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(
        slice_st.loading,
        "load_model",
        lambda *a, **k: pytest.fail("loaded the model before checking the Hub"),
    )
    api = huggingface_hub.HfApi(endpoint=hub)
    with pytest.raises(HubAccessError, match=message):
        train(
            *_config(
                tmp_path, tiny_model_dir, triplets_dir, push_to_hub=True, hub_model_id=repo_id
            ),
            hub_api=api,
        )
    assert not (tmp_path / "run").exists()


def test_cli_push_offline_is_one_line_before_training(
    tmp_path, tiny_model_dir, triplets_dir, capsys, monkeypatch
):

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "train",
                "-o",
                str(tmp_path / "run"),
                "-m",
                tiny_model_dir,
                "--train-data",
                triplets_dir,
                "--push-to-hub",
                "--hub-model-id",
                "org/x",
            ]
        )
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .startswith("slice-st: error: cannot push to org/x: the Hub is switched off")
    )
    assert not (tmp_path / "run").exists()


def test_cli_arguments_are_the_preset_then_the_options(monkeypatch):
    import slice_st.training.trainer as trainer_module
    from slice_st.cli import main

    runs = []
    monkeypatch.setattr(
        trainer_module, "train", lambda args, settings, **more: runs.append((args, settings))
    )
    argv = [
        "train",
        "-o",
        "out",
        "--preset",
        "cpu-minilm",
        "--train-data",
        "msmarco:t.tsv",
        "--max-steps",
        "7",
    ]
    assert main(argv) == 0
    args, settings = runs[0]
    preset = PRESETS["cpu-minilm"]
    assert (
        args.max_steps == 7
        and args.per_device_train_batch_size == preset["per_device_train_batch_size"]
    )
    assert (
        settings.train_data == ["msmarco:t.tsv"] and settings.train_limit == preset["train_limit"]
    )
    assert args.output_dir == "out" and args.learning_rate == 2e-5


def test_bad_config_is_a_clear_error(tmp_path, tiny_model_dir, triplets_dir):
    with pytest.raises(ValueError, match="no training data"):
        train(*_config(tmp_path, tiny_model_dir, triplets_dir, train_data=[]))
    with pytest.raises(FileNotFoundError, match="dev file not found"):
        train(*_config(tmp_path, tiny_model_dir, triplets_dir, dev=str(tmp_path / "missing.tsv")))
    with pytest.raises(ValueError, match="multiple of eval_steps"):
        train(*_config(tmp_path, tiny_model_dir, triplets_dir, save_steps=3, eval_steps=2))
    with pytest.raises(FileNotFoundError, match="training data"):
        train(*_config(tmp_path, tiny_model_dir, triplets_dir, train_data=[str(tmp_path / "nope")]))


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "slice_st.cli", "train", *args]


@pytest.mark.slow  # real training in two processes
def test_resume_after_a_real_kill(tmp_path, tiny_model_dir, triplets_dir):
    output = tmp_path / "run"
    common = [
        "-o",
        str(output),
        "-m",
        tiny_model_dir,
        "--train-data",
        triplets_dir,
        "--per-device-train-batch-size",
        "4",
        "--save-steps",
        "2",
        "--logging-steps",
        "1",
        "--max-span",
        "4",
        "--save-total-limit",
        "10",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    log = tmp_path / "first_run.log"
    with open(log, "w") as handle:
        process = subprocess.Popen(
            _cli(*common, "--max-steps", "400"),
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:  # no clock: the run either writes checkpoint-4 or ends (400 steps) and fails the test
        while not (output / "checkpoint-4" / "trainer_state.json").exists():
            assert process.poll() is None, (
                "training ended before it could be killed:\n" + log.read_text()[-3000:]
            )
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    killed_at = max(
        int(p.name.split("-")[1])
        for p in output.glob("checkpoint-*")
        if (p / "trainer_state.json").exists()
    )
    assert 4 <= killed_at < 400
    result = subprocess.run(
        _cli(*common, "--max-steps", str(killed_at + 4), "--resume"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"trained to step {killed_at + 4}" in result.stderr
    state = json.loads((output / f"checkpoint-{killed_at + 4}" / "trainer_state.json").read_text())
    steps = [entry["step"] for entry in state["log_history"] if "loss" in entry]
    assert steps[:killed_at] == list(
        range(1, killed_at + 1)
    )  # the killed run's history was restored
    assert steps[-1] == killed_at + 4 and len(steps) == len(set(steps))  # continued, not restarted


@pytest.mark.slow  # real training: accelerate launches two processes
@pytest.mark.parametrize("in_batch", [False, True], ids=["triplets", "in-batch-negatives-gathered"])
def test_accelerate_two_cpu_processes(tmp_path, tiny_model_dir, triplets_dir, in_batch):
    output = tmp_path / "ddp"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    command = [
        # accelerate's --cpu launcher starts one process (several need MPI); --multi_gpu starts torchrun
        # processes, and on a machine without GPUs the trainer joins them in a gloo group on the CPU.
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        str(ROOT / "examples" / "train_slice.py"),
        "-o",
        str(output),
        "-m",
        tiny_model_dir,
        "--train-data",
        triplets_dir,
        "--per-device-train-batch-size",
        "2",
        "--max-steps",
        "2",
        "--save-steps",
        "2",
        "--eval-steps",
        "2",
        "--max-span",
        "4",
        "--dev",
        DEV,
    ] + (["--in-batch-negatives"] if in_batch else [])
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]

    reports = dict(
        re.findall(
            r"\[rank (\d)/2\] trained to step 2, .*?parameter checksum (-?[0-9]+\.[0-9]+)",
            result.stderr,
        )
    )
    assert set(reports) == {"0", "1"}, result.stderr[-2000:]  # both ranks trained
    assert reports["0"] == reports["1"]  # gradients were averaged: the replicas stayed identical
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-2"]
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(output / "final"))
    assert model.best_spans(["a dog runs"], ["In the park two dogs were running."])[0][0]


def test_resume_skips_a_checkpoint_killed_mid_save(tmp_path):
    from slice_st.training.trainer import last_complete_checkpoint

    for step, complete in (
        (2, True),
        (4, True),
        (6, False),
    ):  # checkpoint-6: the save a kill interrupted
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"")
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert last_complete_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-4")
    assert last_complete_checkpoint(str(tmp_path / "nothing")) is None


def _earlier_run(path):
    (path / "checkpoint-1").mkdir(parents=True)
    (path / "checkpoint-1" / "trainer_state.json").write_text("{}")
    (path / "final").mkdir()
    (path / "final" / "README.md").write_text("my card")
    return file_tree(path)


def test_train_refuses_a_folder_with_files_before_any_work(
    tmp_path, capsys, tiny_model_dir, monkeypatch
):
    from slice_st import FileAccessError
    from slice_st.training import trainer

    run = tmp_path / "run"
    before = _earlier_run(run)
    monkeypatch.setattr(
        trainer, "build_trainer", lambda *args, **kwargs: pytest.fail("refused only after loading")
    )
    error = cli_error(
        ["train", "-o", str(run), "-m", tiny_model_dir, "--train-data", str(tmp_path / "x")], capsys
    )
    assert "not empty" in error and "--resume" in error and "--overwrite" in error
    assert file_tree(run) == before
    with pytest.raises(FileAccessError, match="not empty"):
        trainer.train(
            *trainer.training_arguments(
                output_dir=str(run), model=tiny_model_dir, train_data=[str(tmp_path / "x")]
            )
        )
    assert file_tree(run) == before
    assert trainer.check_train_output(str(run), resume=True) == str(
        run
    )  # --resume continues the run there
    assert trainer.check_train_output(str(run), overwrite=True) == str(run)


def test_train_into_a_file_is_one_clear_error(tmp_path, capsys, tiny_model_dir):
    target = tmp_path / "notes.txt"
    target.write_text("x")
    for output in (target, target / "run"):
        error = cli_error(
            ["train", "-o", str(output), "-m", tiny_model_dir, "--train-data", str(tmp_path / "x")],
            capsys,
        )
        assert "is a file" in error
    assert target.read_text() == "x"


def test_train_never_writes_or_deletes_through_linked_run_folders(
    make_tiny_model, tmp_path, monkeypatch
):
    """``_final.new`` / ``_final.old`` / ``final`` links in a resumed run's folder: removed as links, their targets
    untouched."""
    from types import SimpleNamespace

    from slice_st.training import trainer

    model = make_tiny_model(128)
    fake = SimpleNamespace(
        model=model,
        train=lambda resume_from_checkpoint=None: SimpleNamespace(training_loss=0.5),
        args=SimpleNamespace(
            process_index=0, world_size=1, output_dir=str(tmp_path / "run"), push_to_hub=False
        ),
        state=SimpleNamespace(global_step=1),
        is_world_process_zero=lambda: True,
    )
    monkeypatch.setattr(trainer, "build_trainer", lambda *args, **kwargs: fake)
    run = tmp_path / "run"
    run.mkdir()
    targets = {}
    for name in ("_final.new", "_final.old", "final"):
        target = tmp_path / f"user-{name.strip('_.')}"
        target.mkdir()
        if (
            name != "_final.new"
        ):  # an empty folder behind _final.new: the old code saved the model into it
            (target / "keep.txt").write_text("mine")
        (run / name).symlink_to(target)
        targets[target] = file_tree(target)
    trainer.train(
        *trainer.training_arguments(output_dir=str(run), resume=True, train_data=["unused"])
    )
    assert {target: file_tree(target) for target in targets} == targets
    assert not os.path.islink(run / "final") and (run / "final" / "modules.json").is_file()
    assert sorted(os.listdir(run)) == ["final"]


@pytest.mark.parametrize("kind", ["symlink", "symlink_to_nothing"])
def test_train_into_a_link_is_one_clear_error_before_any_work(
    tmp_path, capsys, tiny_model_dir, monkeypatch, kind
):
    """``slice-st train -o LINK`` (also ``LINK/``, ``--resume``, ``--overwrite``): one error line, exit 2, before the
    model or data are loaded; nothing written through the link. (Before: a link to an empty folder was trained in.)"""
    from slice_st import FileAccessError
    from slice_st.training import trainer

    target, link = tmp_path / "target", tmp_path / "run"
    if kind == "symlink":
        target.mkdir()
    link.symlink_to(target)
    monkeypatch.setattr(
        trainer, "build_trainer", lambda *args, **kwargs: pytest.fail("refused only after loading")
    )
    train = ["train", "-m", tiny_model_dir, "--train-data", str(tmp_path / "x")]
    for extra in ([], ["--resume"], ["--overwrite"]):
        for output in (str(link), str(link) + "/"):
            error = cli_error([*train, "-o", output, *extra], capsys)
            assert f"output {link} is a symbolic link: name the real folder for the run." in error
    with pytest.raises(FileAccessError, match="is a symbolic link"):
        trainer.check_train_output(str(link), resume=True)
    assert (os.listdir(target) == []) if kind == "symlink" else not target.exists()


@pytest.mark.parametrize(
    "name", ["optimizer.pt", "scheduler.pt", "rng_state.pth", "rng_state_1.pth"]
)
@pytest.mark.parametrize("damage", ["truncated", "empty", "code"])
def test_damaged_checkpoint_state_is_refused_unrun(tmp_path, name, damage):
    import pickle

    import torch

    from slice_st.training.trainer import check_checkpoint_state

    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    torch.save({"state": {}, "param_groups": [{"lr": 0.1}]}, checkpoint / "optimizer.pt")
    check_checkpoint_state(str(checkpoint))  # a good one passes
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    data = (checkpoint / "optimizer.pt").read_bytes()
    (checkpoint / name).write_bytes(
        {"truncated": data[: len(data) // 2], "empty": b"", "code": pickle.dumps(Payload())}[damage]
    )
    with pytest.raises(
        ValueError,
        match=f"--resume: .*{name} is damaged or not plain tensor data.*Delete .*checkpoint-2",
    ):
        check_checkpoint_state(str(checkpoint))
    assert not marker.exists()  # nothing of the pickle was run


def test_lora_layers_puts_the_adapter_on_the_top_layers_only(make_tiny_model):
    from slice_st.training.trainer import SliceArguments, _add_lora

    model = make_tiny_model()
    _add_lora(model, 2, None, layers=1)  # the tiny BERT has 2 layers
    trained = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert trained and all("layer.1." in name and "lora_" in name for name in trained)
    assert (
        len(trained) == 2 * 6
    )  # A and B of query, key, value, attention output, intermediate, output
    with pytest.raises(slice_st.SpanInputError, match="has 2 layers"):
        _add_lora(make_tiny_model(), 2, None, layers=3)
    args = type(
        "Args",
        (),
        {"max_steps": 1, "per_device_train_batch_size": 1, "eval_steps": 1, "save_steps": 1},
    )
    args.logging_steps = 1
    with pytest.raises(slice_st.SpanInputError, match="needs lora_r"):
        SliceArguments(distill_data=["x.txt"], lora_layers=2).check(args)


def test_distill_data_without_a_passage_is_one_line_before_training(
    tmp_path, tiny_model_dir, capsys
):
    """An empty file (or text with no passage of enough words) as ``--distill-data``: the trainer's sampler raised
    "num_samples should be a positive integer value" with a traceback; now one line naming the data and the limit."""
    empty, short = tmp_path / "empty.txt", tmp_path / "short.txt"
    empty.write_text("")
    short.write_text("the dog barks\na man plays\n")
    for data in (empty, short):
        argv = [
            "train",
            "-o",
            str(tmp_path / f"run-{data.stem}"),
            "-m",
            tiny_model_dir,
            "--distill-data",
            str(data),
        ]
        error = cli_error([*argv, "--max-steps", "1", "--quiet"], capsys)
        assert error == (
            f"slice-st: error: --distill-data {data} gives no passage of 20 to 80 words: give more text, or lower "
            "--passage-min-words."
        )
