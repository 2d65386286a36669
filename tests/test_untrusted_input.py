"""Hostile input, second probe (issue 24): terminal escapes, adapters, duplicate inputs, devices, pickles, cards.

A CLI error is one line ``slice-st: error: …`` with exit 2, never a traceback.
"""

from __future__ import annotations

import json
import re

import pytest

from slice_st.cli import main


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr()


def _fails(capsys, *argv) -> str:
    """Run the CLI expecting exit 2 and one error line ``slice-st: error: …`` (no traceback); returns that line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    assert "Traceback" not in error, error
    last = error.rstrip("\n").split("\n")[-1].rpartition("\r")[2]
    assert last.startswith("slice-st: error: ") and error.count("slice-st: error: ") == 1, error
    return last


# ------------------------------------------------------------------------------------------ terminal escapes
HOSTILE_ID = "doc\x1b]0;owned\x07\x1b[2J\x9b31m"
HOSTILE_TEXT = "the dog \x1b[31mbarks\x1b[0m at the \x07 mailman\r"


def test_control_characters_are_escaped_in_table_output(tmp_path, tiny_model_dir, capsys):
    text_file = tmp_path / "calls\x1b]0;owned\x07.txt"  # mine reads text files: the file name is the id
    text_file.write_text(HOSTILE_TEXT.replace("\r", "") + "\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": HOSTILE_ID, "text": HOSTILE_TEXT}) + "\n")
    _run(capsys, "index", "build", corpus, "-o", tmp_path / "ix", "-m", tiny_model_dir, "--no-progress", "--quiet")
    common = ("-m", tiny_model_dir, "--no-progress", "--max-span", "3")
    for where, seen in (
        ((text_file,), "calls\\x1b]0;owned\\x07.txt:1"),
        (("--index", tmp_path / "ix"), "doc\\x1b]0;owned\\x07"),
    ):
        code, out = _run(capsys, "mine", "-q", "dog\x1b[5m", *where, *common, "--color", "never")
        assert code == 0 and seen in out.out and "dog\\x1b[5m" in out.out and "\\x1b[31mbarks" in out.out, out.out
        assert not any(ch in out.out for ch in "\x1b\x07\x9b\r"), out.out
        code, out = _run(capsys, "mine", "-q", "dog", *where, *common, "-f", "jsonl")
        row = json.loads(out.out.splitlines()[0])  # JSON keeps the text exact (JSON escapes it itself)
        if where[0] == text_file:
            assert code == 0 and row["file"] == str(text_file) and row["span"] in HOSTILE_TEXT, row
        else:
            assert code == 0 and row["doc_id"] == HOSTILE_ID and row["span"] in HOSTILE_TEXT, row


def test_control_characters_are_escaped_in_error_lines(tmp_path, capsys):
    assert "\\x1b]0;x\\x07" in _fails(capsys, "mine", "-q", "dog", tmp_path / "missing\x1b]0;x\x07.txt")


# ------------------------------------------------------------------------------------------ the shipped-adapter loader
def _tiny_adapter(folder, config_changes=None, tensors_changes=None, rank=4):
    """A LoRA adapter for the tiny BERT (d=32): the query and value layers of layer 0, ``rank`` r."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 8,
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_dora": False,
        "use_rslora": False,
        "rank_pattern": {},
        "alpha_pattern": {},
        "lora_bias": False,
    }
    config.update(config_changes or {})
    (folder / "adapter_config.json").write_text(json.dumps(config))
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in ("query", "value"):
        key = f"base_model.model.encoder.layer.0.attention.self.{layer}"
        tensors[f"{key}.lora_A.weight"] = torch.randn(rank, 32, generator=generator) * 0.1
        tensors[f"{key}.lora_B.weight"] = torch.randn(32, rank, generator=generator) * 0.1
    tensors.update(tensors_changes or {})
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    return str(folder)


@pytest.mark.parametrize(
    "config, tensors, expected",
    [
        ({"r": 8}, None, "rank 4, but .* says r=8"),
        ({"r": 2}, None, "rank 4, but .* says r=2"),
        ({"r": 4.0}, None, "r must be a positive integer"),
        ({"lora_alpha": 0}, None, "lora_alpha must be a finite number > 0"),
        ({"lora_alpha": -16}, None, "lora_alpha must be a finite number > 0"),
        ({"lora_alpha": float("nan")}, None, "lora_alpha must be a finite number > 0"),
        ({"lora_alpha": float("inf")}, None, "lora_alpha must be a finite number > 0"),
        ({"lora_alpha": "16"}, None, "lora_alpha must be a finite number > 0"),
        ({"bias": "all"}, None, "bias='all' is not applied"),
        ({"modules_to_save": ["pooler"]}, None, "modules_to_save=\\['pooler'\\] not applied"),
        ({"fan_in_fan_out": True}, None, "fan_in_fan_out=True not applied"),
        ({"use_dora": True}, None, "use_dora=True not applied"),
        (None, {"base_model.model.encoder.layer.0.attention.self.query.lora_A.weight": "nan"}, "NaN or infinite"),
        (
            None,
            {"base_model.model.encoder.layer.0.attention.self.query.bias": "zeros"},
            "tensors this loader does not apply",
        ),
        (None, {"base_model.model.pooler.dense.lora_B.weight": "zeros"}, "has no lora_A tensor"),
    ],
)
def test_adapter_loader_refuses_what_it_cannot_apply(tiny_model_dir, tmp_path, config, tensors, expected):
    import torch
    from transformers import BertModel

    from slice_st.pretrained import merge_lora_adapter

    made = {}
    for key, kind in (tensors or {}).items():
        shape = (4, 32) if kind == "nan" else (32, 4) if "lora_B" in key else (32,)
        made[key] = torch.full(shape, float("nan")) if kind == "nan" else torch.zeros(shape)
    folder = _tiny_adapter(tmp_path / "adapter", config, made)
    base = BertModel.from_pretrained(tiny_model_dir)
    before = {name: value.clone() for name, value in base.state_dict().items()}
    with pytest.raises(ValueError, match=expected):
        merge_lora_adapter(base, folder)
    assert all(torch.equal(before[name], value) for name, value in base.state_dict().items())  # nothing merged
    assert merge_lora_adapter(base, _tiny_adapter(tmp_path / "good")) == 2  # a plain adapter still merges


def test_shipped_adapter_with_a_wrong_rank_is_a_model_load_error(tmp_path, monkeypatch, capsys):
    import shutil

    import slice_st
    from slice_st.pretrained import SHIPPED_MODELS, ShippedModel

    shipped = SHIPPED_MODELS["slice-minilm"]
    folder = tmp_path / "slice_minilm"
    shutil.copytree(shipped.adapter_dir, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps(config | {"r": 8}))  # tensors are rank 16: scale 4, not 2
    monkeypatch.setitem(SHIPPED_MODELS, "slice-minilm", ShippedModel("slice-minilm", str(folder), shipped.description))
    with pytest.raises(slice_st.ModelLoadError, match="cannot load the shipped model slice-minilm: .* says r=8"):
        slice_st.load_model()
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    assert "says r=8" in _fails(capsys, "mine", "-q", "dog", corpus, "--no-progress")


def test_nan_vectors_are_an_error_not_no_match(make_tiny_model, tmp_path, monkeypatch, capsys):
    import torch

    import slice_st

    model = make_tiny_model(128)
    with torch.no_grad():
        model[0].auto_model.embeddings.LayerNorm.weight[0] = float("nan")  # as a NaN in a damaged checkpoint or adapter
    with pytest.raises(slice_st.ModelLoadError, match="NaN or infinite token vectors"):
        model.best_spans("dog", "the dog barks")
    with pytest.raises(slice_st.ModelLoadError, match="NaN or infinite token vectors"):
        model.encode_spans("the dog barks")
    monkeypatch.setattr(slice_st, "load_model", lambda *a, **k: model)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    assert "NaN or infinite token vectors" in _fails(capsys, "mine", "-q", "dog", corpus, "--no-progress")


# ------------------------------------------------------------------------------------------ inputs named twice, JSONL
# ids, surrogates
def test_mine_reads_a_file_named_twice_once(tmp_path, tiny_model_dir, capsys, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("a man plays the guitar\nthe dog barks\n")
    os.symlink(tmp_path / "a.txt", tmp_path / "link.txt")
    code, out = _run(
        capsys,
        "mine",
        "-q",
        "dog",
        "a.txt",
        "./a.txt",
        "link.txt",
        "-m",
        tiny_model_dir,
        "-f",
        "jsonl",
        "--no-progress",
    )
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert code == 0 and [(row["file"], row["line"]) for row in rows] == [("a.txt", 2), ("a.txt", 1)]
    assert "./a.txt is the same file as a.txt: read once" in out.err and "link.txt is the same file as a.txt" in out.err


@pytest.mark.parametrize(
    "line, expected",
    [
        ({"id": 5, "text": "the dog"}, "id field 'id' must be a string, got int 5"),
        ({"id": 5.0, "text": "the dog"}, "id field .id. must be a string, got float"),
        ({"id": "", "text": "the dog"}, "empty id"),
        ({"text": "the dog"}, "missing id field 'id'"),
    ],
)
def test_jsonl_ids_are_non_empty_strings(tmp_path, capsys, line, expected):
    from slice_st.data.corpus import CorpusError, read_jsonl

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "a cat"}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(CorpusError, match=f"c.jsonl, line 2: {expected}"):
        read_jsonl(str(corpus))
    assert re.search(expected, _fails(capsys, "index", "build", corpus, "-o", tmp_path / "ix"))


def test_lone_surrogates_are_span_input_errors_and_skippable(tiny_model, tiny_model_dir, tmp_path, capsys):
    from slice_st import SpanIndex, SpanInputError

    bad = "the dog \ud800 barks"
    for call in (
        lambda: tiny_model.best_spans("dog", ["fine", bad]),
        lambda: tiny_model.best_spans(bad, "the dog"),
        lambda: tiny_model.encode_spans(bad),
        lambda: SpanIndex.build(["fine", bad], tiny_model),
    ):
        with pytest.raises(SpanInputError, match="lone surrogate"):
            call()
    index = SpanIndex.build(["the cat", bad], tiny_model, on_error="skip")
    assert index.doc_ids == ["0"] and "lone surrogate" in index.skipped[0][1]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps({"id": "ok", "text": "the cat sat"}) + "\n" + json.dumps({"id": "bad", "text": bad}) + "\n"
    )
    assert "lone surrogate" in _fails(capsys, "index", "build", corpus, "-o", tmp_path / "ix", "-m", tiny_model_dir)
    code, out = _run(
        capsys, "index", "build", corpus, "-o", tmp_path / "ix", "-m", tiny_model_dir, "--skip-bad", "--no-progress"
    )
    assert code == 0 and "skipped bad" in out.err and SpanIndex.load(str(tmp_path / "ix")).doc_ids == ["ok"]


# ------------------------------------------------------------------------------------------ hangs and unbounded
# resources
def test_closed_ray_port_is_a_clear_error_not_a_hang(tmp_path, tiny_model_dir):
    import os
    import socket
    import subprocess
    import sys

    from slice_st import SpanInputError
    from slice_st.index.ray_engine import probe_address

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(
        SpanInputError, match=f"cannot connect to the Ray cluster at 127.0.0.1:{port}: Connection refused"
    ):
        probe_address(f"127.0.0.1:{port}")
    with pytest.raises(SpanInputError, match="cannot connect to the Ray cluster at ray://127.0.0.1"):
        probe_address(f"ray://127.0.0.1:{port}")
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.getcwd())
    command = [
        sys.executable,
        "-m",
        "slice_st.cli",
        "index",
        "build",
        str(corpus),
        "-o",
        str(tmp_path / "ix"),
        "-m",
        tiny_model_dir,
        "--ray",
        f"127.0.0.1:{port}",
        "--no-progress",
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=300
    )  # ray.init used to wait for ever
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(f"slice-st: error: cannot connect to the Ray cluster at 127.0.0.1:{port}")
    )


def test_threads_and_processes_are_bounded(tiny_model, tiny_model_dir, tmp_path, capsys):
    import slice_st
    from slice_st import SpanIndex, SpanInputError
    from slice_st.backends import parallelism_limit

    limit = parallelism_limit()
    with pytest.raises(
        SpanInputError, match=f"processes={limit + 1} is more than this machine can use: at most {limit}"
    ):
        SpanIndex.build(["the dog"], tiny_model, processes=limit + 1)
    with pytest.raises(SpanInputError, match="processes=100000 is more than"):
        SpanIndex.build(["the dog"], tiny_model, devices=["cpu"] * 100000)
    with pytest.raises(ValueError, match="threads=1000000 is more than this machine can use"):
        slice_st.load_model(tiny_model_dir, threads=1_000_000)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    assert "threads=1000000 is more than" in _fails(
        capsys, "mine", "-q", "dog", corpus, "-m", tiny_model_dir, "--threads", "1000000"
    )
    assert "processes=100000 is more than" in _fails(
        capsys, "index", "build", corpus, "-o", tmp_path / "ix", "-m", tiny_model_dir, "--processes", "100000"
    )


def test_only_regular_files_are_read_as_corpora(tmp_path, tiny_model_dir, capsys):
    import os
    from collections.abc import Iterator

    from slice_st.text import FileAccessError, file_lines, read_texts

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it for reading would block: it is refused unopened
    for device in ("/dev/zero", "/dev/urandom", str(fifo)):
        with pytest.raises(FileAccessError, match="not a regular file"):
            read_texts([device])
    assert "not a regular file" in _fails(capsys, "mine", "-q", "cat", "/dev/zero", "-m", tiny_model_dir)
    assert "not a regular file" in _fails(
        capsys, "index", "build", "/dev/urandom", "-o", tmp_path / "ix", "-m", tiny_model_dir
    )
    assert "not a regular file" in _fails(
        capsys, "mine", "--queries", "/dev/zero", tmp_path / "pipe", "-m", tiny_model_dir
    )
    text = tmp_path / "a.txt"
    text.write_bytes("\ufeffone\r\ntwo caf\u00e9\n\nthree".encode())
    lines = file_lines(str(text))
    assert isinstance(lines, Iterator)  # streamed, line by line
    assert list(lines) == [(1, 1, "one\r\n"), (2, 6, "two caf\u00e9\n"), (3, 15, "\n"), (4, 16, "three")]
    text.write_bytes(b"ok\nbad \xff here\n")
    with pytest.raises(ValueError, match="is not UTF-8 text \\(invalid start byte at byte 7, line 2\\)"):
        list(file_lines(str(text)))


# ------------------------------------------------------------------------------------------ tracebacks → one line
def test_nlist_above_the_chunks_is_a_clear_error(tiny_model, tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("faiss")
    from slice_st import SpanIndex, SpanInputError

    index = SpanIndex.build(["the dog barks at the mailman", "a man plays the guitar"], tiny_model, max_span=3)
    with pytest.raises(SpanInputError, match="nlist=5000 is more than the .* chunks of this index"):
        index.build_candidates(kind="ivf", nlist=5000)
    index.save(str(tmp_path / "ix"))
    assert "nlist=5000 is more than" in _fails(capsys, "index", "candidates", tmp_path / "ix", "--nlist", "5000")


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth", "rng_state_1.pth"])
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
        ValueError, match=f"--resume: .*{name} is damaged or not plain tensor data.*Delete .*checkpoint-2"
    ):
        check_checkpoint_state(str(checkpoint))
    assert not marker.exists()  # nothing of the pickle was run


# ------------------------------------------------------------------------------------------ truncate_dim, devices
def test_model_level_truncate_dim_is_honoured(tiny_model_dir):
    import numpy as np
    from sentence_transformers import SentenceTransformer

    short = SentenceTransformer(tiny_model_dir, device="cpu", truncate_dim=8)
    full = SentenceTransformer(tiny_model_dir, device="cpu")
    assert short.encode("the dog").shape == (8,)
    assert short.encode_spans("the dog barks", max_span=2).embeddings.shape == (5, 8)  # like encode: 8-d, not 32-d
    assert short.encode_span_queries("dog").shape == (8,)
    assert short.encode_spans("the dog barks", max_span=2, truncate_dim=4).embeddings.shape == (
        5,
        4,
    )  # the argument wins
    found = short.best_spans("dog", "the dog barks at the mailman", max_span=2)[0][0][0]
    spans = full.encode_spans("the dog barks at the mailman", max_span=2)
    query, vector = full.encode_span_queries("dog")[:8], spans.embeddings[spans.spans.index(found.span)][:8]
    assert (
        abs(found.similarity - float(query @ vector / np.linalg.norm(query) / np.linalg.norm(vector))) < 1e-5
    )  # scored in 8-d


def test_cuda_on_a_cpu_torch_is_a_clear_error(tiny_model):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for call in (
        lambda: tiny_model.encode_spans("the dog", device="cuda"),
        lambda: tiny_model.best_spans("dog", "the dog", device="cuda"),
        lambda: tiny_model.encode_span_queries("dog", device="cuda:0"),
    ):
        with pytest.raises(ValueError, match="CUDA is not available here"):
            call()


def test_a_slice_minilm_folder_in_the_cwd_is_not_an_indexs_model(tmp_path, monkeypatch, tiny_model_dir):
    import slice_st
    from slice_st import SpanIndex
    from slice_st.index.fingerprint import model_source

    index = SpanIndex.build(["the dog barks"], slice_st.load_model(), max_span=2)
    index.save(str(tmp_path / "ix"))
    monkeypatch.chdir(tmp_path)
    slice_st.load_model(tiny_model_dir).save(str(tmp_path / "slice-minilm"))  # an unrelated folder of that name
    assert model_source(str(tmp_path / "ix"), {"model_name": "slice-minilm"}) == "slice-st/slice-minilm"
    loaded = SpanIndex.load(str(tmp_path / "ix"))
    assert loaded.search("dog", top_k=1)[0][
        0
    ].span  # the shipped model (the tiny one would be refused: another fingerprint)
    assert (
        slice_st.load_model("slice-minilm").get_embedding_dimension() == 32
    )  # a bare name still means the folder here


def test_saved_weights_have_the_permissions_of_the_other_files(tiny_model, tmp_path):
    import os

    import slice_st

    slice_st.save_slice_model(tiny_model, str(tmp_path / "saved"))
    modes = {
        name: os.stat(tmp_path / "saved" / name).st_mode & 0o777
        for name in ("model.safetensors", "config.json", "modules.json")
    }
    assert len(set(modes.values())) == 1, modes  # model.safetensors was 0600 while the rest was 0644


def test_huge_threshold_is_no_warning(tiny_model_dir, tmp_path, capsys):
    import warnings

    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        code, out = _run(capsys, "mine", "-q", "dog", corpus, "-m", tiny_model_dir, "-t", "1e308", "--no-progress")
    assert code == 0 and out.out.strip() == "no match at or above threshold 1e+308"


def test_a_bad_training_config_is_named(tmp_path):
    from slice_st.training.shipping import ship_adapter

    run = tmp_path / "run"
    _tiny_adapter(run / "adapter")
    (run / "final").mkdir()
    (run / "final" / "slice_train_config.json").write_text("{not json")
    with pytest.raises(
        ValueError, match="final/slice_train_config.json: not a training config written by slice-st train"
    ):
        ship_adapter(str(run), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ cards
def test_saving_the_shipped_model_writes_its_own_card(tmp_path):
    import slice_st

    model = slice_st.load_model()
    card = model.model_card_data
    assert (card.license, card.base_model) == ("cc-by-nc-sa-4.0", "sentence-transformers/all-MiniLM-L6-v2")
    slice_st.save_slice_model(model, str(tmp_path / "saved"))
    text = (tmp_path / "saved" / "README.md").read_text()
    head = text.split("---")[1]
    assert "license: cc-by-nc-sa-4.0" in head and "license: apache-2.0" not in head  # not the base model's card
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in head and "# all-MiniLM-L6-v2\n" not in text
    assert "# slice-minilm" in text and "slice-st" in head
    reloaded = slice_st.load_model(str(tmp_path / "saved"))
    assert reloaded.encode("a test").shape == (384,)


def test_a_trainer_card_of_the_shipped_model_names_base_and_licence(tmp_path):
    """The SentenceTransformerTrainer renders the card from the same model_card_data: no "Base model: Unknown", no
    missing licence."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    import slice_st

    model = slice_st.load_model()
    data = Dataset.from_dict(
        {"anchor": ["a dog runs", "a cat sleeps"], "positive": ["the dog is running", "the cat is asleep"]}
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
    assert "license: cc-by-nc-sa-4.0" in head and "base_model: sentence-transformers/all-MiniLM-L6-v2" in head
    assert (
        "**Base model:** [sentence-transformers/all-MiniLM-L6-v2]" in text and "- **License:** cc-by-nc-sa-4.0" in text
    )


def _slice_card_checks(text: str, license: str, loss: str) -> None:
    head = text.split("---")[1]
    assert f"license: {license}" in head and "base_model: sentence-transformers/all-MiniLM-L6-v2" in head
    assert "## SLICE: span embeddings for phrase mining" in text and "Span-Aggregatable" in text  # the SLICE section
    assert f"- **Loss:** `{loss}`" in text and "2405.07263" in text  # the loss that trained it, the citation
    assert "Base model:** Unknown" not in text and "slice-st" in head


_TRIPLETS = {
    "anchor": ["a dog runs", "a cat sleeps"],
    "positive": ["Yesterday the dog was running in the park.", "At noon the cat was asleep on the sofa."],
    "negative": ["The bank closes at five.", "Prices rose again this month."],
}


@pytest.mark.parametrize("how", ["fit", "trainer"])
def test_fit_and_trainer_cards_carry_the_slice_section(tmp_path, how):
    """One card path: a SLICE loss makes the model's card a SLICE card, so model.fit() and a user's own
    SentenceTransformerTrainer write the SLICE section (span settings, the loss, the citation), with the base model and
    licence the embedded base already named (before: no SLICE section; "Base model: Unknown" and no licence for the
    embedded base)."""
    from datasets import Dataset
    from sentence_transformers import InputExample, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from torch.utils.data import DataLoader

    import slice_st
    from slice_st.losses import SpanMaxCrossEntropyLoss

    model = slice_st.load_model("base")
    loss = SpanMaxCrossEntropyLoss(model, max_span=6)
    if how == "fit":
        examples = [InputExample(texts=list(row)) for row in zip(*_TRIPLETS.values())]
        model.fit(train_objectives=[(DataLoader(examples, batch_size=2), loss)], epochs=1, show_progress_bar=False)
    else:
        args = SentenceTransformerTrainingArguments(
            str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=2, report_to=[], save_strategy="no"
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
    import slice_st
    from slice_st.card import SliceModelCardData

    model = slice_st.load_model()
    card = model.model_card_data
    assert isinstance(card, SliceModelCardData) and card.shipped_name == "slice-minilm" and card.model_id is None
    assert card.slice_section["steps"] == 800 and card.slice_section["lora"] == {"r": 16, "alpha": 32}
    slice_st.save_slice_model(model, str(tmp_path / "saved"))
    model.save(str(tmp_path / "plain"))  # sentence-transformers' own save: the same card, not the base's README
    for folder in ("saved", "plain"):
        text = (tmp_path / folder / "README.md").read_text()
        _slice_card_checks(text, "cc-by-nc-sa-4.0", "SpanDistillationLoss")
        assert "Trained on non-commercial data (SICK)" in text and "ParaBank" in text
        assert 'SentenceTransformer("sentence_transformers_model_id")' in text  # not by the shipped name: no id yet


def test_the_shipped_model_keeps_the_options_it_was_loaded_with():
    """load_model() options reach the shipped model (it is rebuilt over the base's modules for its own card)."""
    import slice_st

    model = slice_st.load_model(truncate_dim=32, prompts={"query": "query: "}, similarity_fn_name="dot")
    assert model.encode("a test").shape == (32,) and model.prompts["query"] == "query: "
    assert model.similarity_fn_name == "dot" and model.model_card_data.shipped_name == "slice-minilm"
    assert model.best_spans(["a test"], ["This is a test of the span search."])[0][0][0].span


def test_a_user_model_card_keeps_what_it_said(tiny_model_dir):
    """Building a SLICE loss turns a card into a SLICE card without losing what it said (licence, language, model
    id, tags), and a teacher given as a local path is never named in the card."""
    import slice_st
    from slice_st.losses import SpanDistillationLoss, SpanMaxCrossEntropyLoss

    model = slice_st.load_model(tiny_model_dir)
    model.model_card_data.license = "mit"
    model.model_card_data.add_tags("my-tag")
    SpanMaxCrossEntropyLoss(model)
    SpanMaxCrossEntropyLoss(model)  # once per loss class
    SpanDistillationLoss(model, teacher=tiny_model_dir)
    card = model.model_card_data
    assert card.license == "mit" and "my-tag" in card.tags and "slice-st" in card.tags
    names = [entry["name"] for entry in card.slice_section["losses"]]
    assert names == ["SpanMaxCrossEntropyLoss", "SpanDistillationLoss"]
    assert tiny_model_dir not in json.dumps(card.slice_section)
    assert card.model is model


def test_loading_the_shipped_model_warns_of_nothing(caplog):
    """The card keeps the shipped name as model_id without sentence-transformers' warning about an id without an
    organisation (it would print on every load_model())."""
    import logging

    import slice_st
    from slice_st.losses import SpanMaxCrossEntropyLoss

    with caplog.at_level(logging.WARNING):
        model = slice_st.load_model()
        SpanMaxCrossEntropyLoss(model)
    assert model.model_card_data.shipped_name == "slice-minilm"
    assert not [record for record in caplog.records if "model_id" in record.getMessage()]
