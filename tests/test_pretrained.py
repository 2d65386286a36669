"""The model shipped in the package (``slice-minilm``): size, provenance, merge, default, clear errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from helpers import cli_fails, hub_env

import slice_st
from slice_st.pretrained import SHIPPED_MODELS, is_shipped_model_name, shipped_model

SHIPPED = shipped_model("slice-minilm")


@pytest.mark.parametrize("name", ["slice-minilm", "slice-mpnet"])
def test_adapter_is_small_documented_and_commercially_usable(name):
    shipped = shipped_model(name)
    shipped.check_files()
    folder = shipped.adapter_dir
    assert (
        sum(os.path.getsize(os.path.join(folder, file)) for file in os.listdir(folder))
        <= 4 * 1024 * 1024
    )
    provenance = shipped.provenance
    for key in (
        "base_model",
        "recipe",
        "command",
        "training_data",
        "licence",
        "commit",
        "dev_metrics",
    ):
        assert provenance.get(key), key
    assert set(provenance["training_data"]) <= {"stsb", "snli"}  # the commercially usable sets only
    assert (
        provenance["licence"].startswith("cc-by-sa-4.0:")
        and "non-commercial" not in provenance["licence"]
    )
    with open(os.path.join(folder, "adapter_config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    assert config["peft_type"] == "LORA" and not config["base_model_name_or_path"].startswith(
        "/"
    )  # no local paths
    assert config["base_model_name_or_path"] == (
        shipped.base or "sentence-transformers/all-MiniLM-L6-v2"
    )


def test_names():
    assert set(SHIPPED_MODELS) == {"slice-minilm", "slice-mpnet"}
    assert is_shipped_model_name("slice-minilm") and is_shipped_model_name("slice-st/slice-minilm")
    assert (
        is_shipped_model_name("slice-mpnet")
        and shipped_model("slice-mpnet").base_env == "SLICE_ST_BASE_MPNET"
    )
    assert not is_shipped_model_name("base") and not is_shipped_model_name(None)
    with pytest.raises(KeyError, match="shipped"):
        shipped_model("nope")


@pytest.fixture(scope="module")
def shipped_and_base():
    return slice_st.load_model(), slice_st.load_model("base")


def test_default_is_the_shipped_model(shipped_and_base):
    shipped, base = shipped_and_base
    assert (
        shipped.model_card_data.shipped_name == "slice-minilm"
    )  # its name, not a Hub id the card would print
    assert shipped.model_card_data.model_id is None and base.model_card_data.model_id is None
    changed = [
        name
        for (name, a), (_, b) in zip(shipped.named_parameters(), base.named_parameters())
        if not torch.equal(a, b)
    ]
    assert len(changed) == 36 and all(
        ".encoder." in name for name in changed
    )  # 6 linear layers in each of 6 blocks


def test_merge_equals_peft(shipped_and_base):
    peft = pytest.importorskip("peft")  # noqa: F841 - peft is a training extra; the merge itself needs only torch
    shipped, _ = shipped_and_base
    reference = slice_st.load_model("base")
    reference.load_adapter(SHIPPED.adapter_dir)
    texts = [
        "A man is playing the guitar on stage.",
        "The flight to Denver was delayed by three hours.",
    ]
    merged = shipped.encode_spans(texts, max_span=4)
    adapted = reference.encode_spans(texts, max_span=4)
    for a, b in zip(merged, adapted):
        assert a.spans == b.spans
        assert abs(a.embeddings - b.embeddings).max() < 1e-4


def test_reopens_by_name_and_index_identity(shipped_and_base):
    from slice_st.loading import model_fingerprint, model_identity

    shipped, base = shipped_and_base
    assert model_identity(shipped) == ("slice-minilm", "")
    again = slice_st.load_model("slice-st/slice-minilm")
    assert model_fingerprint(again) == model_fingerprint(shipped) != model_fingerprint(base)


def test_save_slice_model_is_flag_free(shipped_and_base, tmp_path):
    from sentence_transformers import SentenceTransformer

    shipped, _ = shipped_and_base
    path = slice_st.save_slice_model(shipped, str(tmp_path / "slice-minilm"))
    loaded = SentenceTransformer(path)
    text = ["Customer: my bag was lost on the way to Denver."]
    assert abs(loaded.encode(text) - shipped.encode(text)).max() < 1e-5


def test_pinned_behaviour_of_the_shipped_adapter(shipped_and_base):
    """A bad or stale adapter file cannot ship silently: known best spans and scores (to 1e-3) of this adapter."""
    shipped, base = shipped_and_base
    texts = [
        "Customer: My son plays the guitar and wants to bring it on board as hand luggage.",
        "Agent: I'm sorry about that, the departure got delayed because of the storm in Chicago.",
    ]
    result = shipped.best_spans(
        ["a man plays the guitar", "the flight was delayed"], texts, top_k=1, scorer="phrase"
    )
    assert (result[0][0][0].span, result[1][1][0].span) == (
        "plays the guitar",
        "the departure got delayed",
    )
    assert result[0][0][0].similarity == pytest.approx(0.8060, abs=1e-3)
    assert result[1][1][0].similarity == pytest.approx(0.7090, abs=1e-3)
    assert result[0][0][0].score == pytest.approx(
        0.7549, abs=1e-3
    )  # the "phrase" scorer: shorter than the query
    plain = base.best_spans(["the flight was delayed"], texts[1:], top_k=1, scorer="max-cosine")[0][
        0
    ][0]
    assert (plain.span, round(plain.score, 3)) == (
        "that, the departure got delayed",
        0.660,
    )  # the base model, for contrast


@pytest.mark.parametrize("damage", ["wrong_rank", "truncated", "missing"])
def test_a_changed_shipped_adapter_is_a_model_load_error(tmp_path, monkeypatch, capsys, damage):
    from slice_st.pretrained import ShippedModel

    shipped = SHIPPED_MODELS["slice-minilm"]
    folder = tmp_path / "slice_minilm"
    shutil.copytree(shipped.adapter_dir, folder)
    weights, config_path = folder / "adapter_model.safetensors", folder / "adapter_config.json"
    if damage == "wrong_rank":
        config_path.write_text(
            json.dumps(json.loads(config_path.read_text()) | {"r": 8})
        )  # scale 4, not 2
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:1000])
    else:
        weights.unlink()
    monkeypatch.setitem(
        SHIPPED_MODELS,
        "slice-minilm",
        ShippedModel("slice-minilm", str(folder), shipped.description),
    )
    with pytest.raises(
        slice_st.ModelLoadError, match="cannot load the shipped model slice-minilm: .* not the file"
    ):
        slice_st.load_model()
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    assert "not the file shipped" in cli_fails(capsys, "mine", "-q", "dog", corpus, "--no-progress")


# ------------------------------------------------------------------------ a shipped model whose base is on the Hub
HUB_SHIPPED = """
import json, os, sys
import torch
torch.set_num_threads(1)
import slice_st
from slice_st import cli
from slice_st.pretrained import SHIPPED_MODELS, ShippedModel

adapter, mode = sys.argv[1], sys.argv[2]
SHIPPED_MODELS["slice-mpnet"] = ShippedModel(
    "slice-mpnet", adapter, "a stand-in", base="org/tiny-base", base_env="SLICE_ST_BASE_MPNET"
)
if mode == "cli":
    sys.exit(cli.main(["mine", "-q", "plays the guitar", sys.argv[3], "--model", "slice-mpnet", "--no-progress"]))
model = slice_st.load_model("slice-mpnet")
vectors = model.encode_spans(["A man plays the guitar."], max_span=3)[0].embeddings
print(json.dumps({"name": model.model_card_data.shipped_name, "first": vectors[0][:4].tolist()}))
"""


@pytest.fixture
def stand_in(hub, tmp_path, make_tiny_model):
    """A tiny base pushed to the test Hub as ``org/tiny-base`` and a LoRA adapter for it, with its provenance."""
    import peft

    from slice_st.pretrained import file_sha256

    folder = tmp_path / "stand-in"
    base = make_tiny_model()
    base.save(str(folder / "base"))
    torch.manual_seed(1)
    transformer = peft.get_peft_model(
        base[0].auto_model,
        peft.LoraConfig(r=2, lora_alpha=4, target_modules="all-linear", init_lora_weights=False),
    )
    transformer.save_pretrained(str(folder / "adapter"))
    digests = {
        name: file_sha256(str(folder / "adapter" / name)) for name in os.listdir(folder / "adapter")
    }
    provenance = {
        "recipe": {"model": "org/tiny-base"},
        "licence": "apache-2.0: a test",
        "sha256": digests,
    }
    (folder / "adapter" / "provenance.json").write_text(json.dumps(provenance))
    push = "import sys; from huggingface_hub import HfApi; api = HfApi(); api.create_repo(sys.argv[2]); "
    push += "api.upload_folder(repo_id=sys.argv[2], folder_path=sys.argv[1])"
    run_python(push, hub_env(hub, folder / "home"), str(folder / "base"), "org/tiny-base")
    return folder


def test_a_shipped_model_gets_its_base_from_the_hub_then_offline(hub, stand_in, tmp_path):
    adapter, home = str(stand_in / "adapter"), tmp_path / "home"
    online = json.loads(
        run_python(HUB_SHIPPED, hub_env(hub, home, token=None), adapter, "load").stdout
    )
    offline = json.loads(
        run_python(
            HUB_SHIPPED, hub_env(hub, home, token=None, offline=True), adapter, "load"
        ).stdout
    )
    assert online == offline and online["name"] == "slice-mpnet"
    local = hub_env(hub, tmp_path / "empty", offline=True) | {
        "SLICE_ST_BASE_MPNET": str(stand_in / "base")
    }
    assert json.loads(run_python(HUB_SHIPPED, local, adapter, "load").stdout) == online
    unset = hub_env(hub, home, offline=True) | {"SLICE_ST_BASE_MPNET": ""}
    plain = json.loads(run_python(HUB_SHIPPED, unset, adapter, "load").stdout)
    assert plain == online
    corpus = tmp_path / "calls.txt"
    corpus.write_text("A man plays the guitar on stage.\n")
    mined = run_python(HUB_SHIPPED, hub_env(hub, home, offline=True), adapter, "cli", str(corpus))
    assert "guitar" in mined.stdout


@pytest.mark.parametrize("setting", ["offline", "bad-folder"])
def test_a_base_that_cannot_be_had_is_one_clear_line(hub, stand_in, tmp_path, setting):
    env = hub_env(hub, tmp_path / "empty", offline=True)
    if setting == "bad-folder":
        env["SLICE_ST_BASE_MPNET"] = str(tmp_path / "nothing")
    corpus = tmp_path / "calls.txt"
    corpus.write_text("A man plays the guitar on stage.\n")
    done = subprocess.run(
        [sys.executable, "-c", HUB_SHIPPED, str(stand_in / "adapter"), "cli", str(corpus)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "slice-mpnet is built on org/tiny-base" in done.stderr
    assert "SLICE_ST_BASE_MPNET" in done.stderr


def run_python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


# ------------------------------------------------------------------ slice-mpnet with its real base (slow: 440 MB)
MPNET_BASE = os.path.expanduser(
    os.environ.get("SLICE_ST_MPNET_DIR", "~/.cache/slice-st/all-mpnet-base-v2")
)
MINE = "import sys; from slice_st import cli; sys.exit(cli.main(sys.argv[1:]))"


@pytest.mark.slow
@pytest.mark.skipif(
    not os.path.isfile(os.path.join(MPNET_BASE, "model.safetensors")),
    reason="no all-mpnet-base-v2 folder (../shared/tools/get-mpnet.sh; SLICE_ST_MPNET_DIR)",
)
def test_slice_mpnet_mines_from_an_empty_cache_through_the_hub_then_offline(tmp_path):
    """The base is pushed to the test Hub under its real id; a user with an empty ``HF_HOME`` mines with
    ``--model slice-mpnet`` (the base downloads once), then again offline from the cache."""
    from hub_server import running_hub

    with running_hub(tmp_path / "hub-data", orgs=("sentence-transformers",)) as hub:
        _mine_with_slice_mpnet(hub, tmp_path)


def _mine_with_slice_mpnet(hub: str, tmp_path) -> None:
    push = "import sys; from huggingface_hub import HfApi; api = HfApi(); api.create_repo(sys.argv[2]); "
    push += "api.upload_folder(repo_id=sys.argv[2], folder_path=sys.argv[1])"
    base_id = SHIPPED_MODELS["slice-mpnet"].base
    run_python(push, hub_env(hub, tmp_path / "pusher"), MPNET_BASE, base_id)
    corpus = tmp_path / "calls.txt"
    corpus.write_text(
        "Hello, thanks for calling. My suitcase never arrived at the airport, can you help?\n"
    )
    args = [
        "mine",
        "-q",
        "my luggage was lost",
        str(corpus),
        "--model",
        "slice-mpnet",
        "--no-progress",
    ]
    home = tmp_path / "home"
    without_folder = {"SLICE_ST_BASE_MPNET": ""}
    online = run_python(MINE, hub_env(hub, home, token=None) | without_folder, *args).stdout
    offline = run_python(
        MINE, hub_env(hub, home, token=None, offline=True) | without_folder, *args
    ).stdout
    assert online == offline and "suitcase never arrived" in online
    index = tmp_path / "index"
    build = [
        "index",
        "build",
        str(corpus),
        "-o",
        str(index),
        "--model",
        "slice-mpnet",
        "--no-progress",
    ]
    offline_env = hub_env(hub, home, token=None, offline=True) | without_folder
    run_python(MINE, offline_env, *build)
    info = json.loads(run_python(MINE, offline_env, "index", "info", str(index)).stdout)
    assert info["model_name"].endswith("slice-mpnet") and info["documents"] == 1
