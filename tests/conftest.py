"""Shared fixtures: tiny random BERT sentence-transformers (real MiniLM tokenizer) and the real default model.

The tiny models are fast enough to run hundreds of forward passes; the real all-MiniLM-L6-v2 is used
only where semantics matter (best span of a paraphrase).
"""

from __future__ import annotations

import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import shutil
from collections.abc import Callable

import pytest
import torch
from hypothesis import HealthCheck, settings

import slice_st

settings.register_profile(
    "fast",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)
TINY_DIM = 32
SHORT_SEQ_LEN = 24


# Tiny models gain nothing from intra-op threads, and on a busy 2-core machine threaded matmuls are
# up to 100x slower; SLICE_TEST_THREADS overrides.
torch.set_num_threads(int(os.environ.get("SLICE_TEST_THREADS", "1")))
# The command line sets torch's threads from slice_st.backends.default_threads(): keep it on the same count.
os.environ.setdefault("SLICE_ST_THREADS", os.environ.get("SLICE_TEST_THREADS", "1"))


@pytest.fixture(autouse=True)
def mine_cache_folder(tmp_path_factory, monkeypatch) -> str:
    """``slice-st mine``'s cache of encoded files in a new folder per test (never the user's ~/.cache)."""
    folder = str(tmp_path_factory.mktemp("mine-cache"))
    monkeypatch.setenv("SLICE_ST_CACHE", folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A folder with a randomly initialised 2-layer BERT (d=32) and the real all-MiniLM-L6-v2 tokenizer."""
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny_bert")
    source = slice_st.loading.default_model_path()
    for name in TOKENIZER_FILES:
        shutil.copy(os.path.join(source, name), folder / name)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=TINY_DIM,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).eval().save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="session")
def make_tiny_model(tiny_model_dir) -> Callable[..., object]:
    """Factory: a fresh tiny ``SentenceTransformer`` (safe to mutate) with the given ``max_seq_length``."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    def make(max_seq_length: int = 128):
        model = SentenceTransformer(
            modules=[
                Transformer(tiny_model_dir, max_seq_length=max_seq_length),
                Pooling(TINY_DIM, "mean"),
            ],
            device="cpu",
        )
        return model.eval()

    return make


@pytest.fixture(scope="session")
def tiny_model(make_tiny_model):
    """Shared tiny model (max_seq_length=128). Treat as read-only."""
    return make_tiny_model(128)


@pytest.fixture(scope="session")
def tiny_model_short(make_tiny_model):
    """Shared tiny model with a small window (max_seq_length=24 → 22 content tokens) to force windowing."""
    return make_tiny_model(SHORT_SEQ_LEN)


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    return tiny_model.tokenizer


@pytest.fixture(scope="session")
def real_model():
    """The embedded all-MiniLM-L6-v2 (offline). Treat as read-only."""
    return slice_st.load_model(device="cpu").eval()


def pytest_addoption(parser):
    """``--update-docs``: tests/test_docs.py rewrites the outputs shown in README.md and docs/ instead of failing.
    ``--run-ray``: also run the tests marked ``ray``."""
    parser.addoption(
        "--update-docs",
        action="store_true",
        default=False,
        help="rewrite the outputs shown in the docs",
    )
    parser.addoption(
        "--run-ray", action="store_true", default=False, help="also run the tests marked ray"
    )


def pytest_collection_modifyitems(config, items):
    """Tests marked ``ray`` start a local Ray cluster (a minute and more): skipped unless ``--run-ray`` is given or
    ``-m`` names the marker (``make test`` runs them on a line of their own; docs/contributing.md)."""
    if config.getoption("--run-ray") or re.search(r"\bray\b", config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(
        reason="starts a local Ray cluster: run with --run-ray or -m ray (make test does)"
    )
    for item in items:
        if item.get_closest_marker("ray") is not None:
            item.add_marker(skip)


@pytest.fixture()
def hub(tmp_path_factory):
    """The test Hub (tests/hub_server.py) on a free port of 127.0.0.1, its repositories in a new folder; yields its
    URL. Clients reach it in new processes with ``helpers.hub_env(url, home)``."""
    from hub_server import running_hub

    with running_hub(tmp_path_factory.mktemp("hub-data")) as url:
        yield url
