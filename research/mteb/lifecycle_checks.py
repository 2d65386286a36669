"""The checks mteb applies to the tasks it ships (metadata, descriptive statistics, evaluate, cache, overwrite
strategies, preloaded data, results by name), run on ``STSBContext(FILE)``; one PASS/FAIL line per check.

    python research/mteb/lifecycle_checks.py $DATA/stsb_context/stsb-context-dev.tsv

The model is a tiny random BERT (the scores mean nothing; the life cycle is what is checked). The descriptive-
statistics check writes the statistics where the task keeps them (for the dev half: the file slice-st ships).
"""

import json
import logging
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import torch  # noqa: E402

torch.set_num_threads(1)
import mteb  # noqa: E402
from sentence_transformers import SentenceTransformer, SentenceTransformerModelCardData  # noqa: E402

import slice_st  # noqa: E402
from slice_st.integrations.mteb import STSBContext, mteb_model  # noqa: E402

if len(sys.argv) != 2:
    sys.exit(__doc__)
DEV = sys.argv[1]
tmp = tempfile.mkdtemp()


def tiny():
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import BertConfig, BertModel

    folder = os.path.join(tmp, "tiny")
    os.makedirs(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(os.path.join(slice_st.loading.default_model_path(), name), folder)
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=30522,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    ).eval().save_pretrained(folder)
    return SentenceTransformer(
        modules=[Transformer(folder, max_seq_length=128), Pooling(32, "mean")], device="cpu"
    ).eval()


class StubTokenizerModel(
    SentenceTransformer
):  # the shape of mteb's tests/mock_models.py MockSentenceTransformer
    model_card_data = SentenceTransformerModelCardData(model_name="mock/MockSentenceTransformer")
    prompts = {}

    def __init__(self):
        self._modules = {}

    def encode(self, inputs, **kwargs):
        import numpy as np

        return np.random.RandomState(42).randn(len(inputs), 10)

    @staticmethod
    def get_sentence_embedding_dimension():
        return 10

    def max_seq_length(self):
        return 10

    @property
    def similarity_fn_name(self):
        return "cosine"


MODEL = mteb_model(tiny())


def small():
    return STSBContext(DEV, limit=16, max_span=4)


def check(name):
    def wrap(fn):
        try:
            out = fn()
            print(f"PASS  {name}" + (f"  ({out})" if out else ""))
        except BaseException as e:
            line = " ".join(str(e).split())[:230]
            print(f"FAIL  {name}: {type(e).__name__}: {line}")
        return fn

    return wrap


@check(
    "metadata: _validate_metadata, is_filled, no trust_remote_code, simplified_task_type, descriptive_stats, n_samples"
)
def _():
    task = STSBContext(DEV)
    task.metadata._validate_metadata()
    assert task.metadata.is_filled(), "not filled"
    assert task.metadata.dataset.get("trust_remote_code", False) is False
    assert isinstance(task.metadata.simplified_task_type, str)
    assert task.metadata.descriptive_stats is not None, (
        "Dataset STSBContext should have descriptive stats"
    )
    assert task.metadata.n_samples is not None, "n_samples is None"
    return f"n_samples={task.metadata.n_samples}"


@check("calculate_descriptive_statistics(overwrite_results=True) on the dev file")
def _():
    task = STSBContext(DEV)
    stats = task.calculate_descriptive_statistics(overwrite_results=True)
    samples = [s["num_samples"] for s in stats.values()]
    return f"splits={list(stats)} num_samples={samples} written to {task.metadata.descriptive_stat_path}"


@check("evaluate: task_name matches, result splits == task.eval_splits")
def _():
    task = small()
    r = mteb.evaluate(MODEL, task, cache=None, co2_tracker=False, show_progress_bar=False)[0]
    assert r.task_name == task.metadata.name
    assert set(r.eval_splits) == set(task.eval_splits), (
        f"splits should match task: {r.eval_splits} vs {task.eval_splits}"
    )


@check("evaluate twice on one object: same score")
def _():
    task = small()
    a = mteb.evaluate(MODEL, task, cache=None, co2_tracker=False, show_progress_bar=False)[
        0
    ].get_score()
    b = mteb.evaluate(MODEL, task, cache=None, co2_tracker=False, show_progress_bar=False)[
        0
    ].get_score()
    assert a == b, (a, b)
    return f"{a:.4f} == {b:.4f}"


@check("metadata after unload_data() is the instance's own")
def _():
    task = small()
    before = task.metadata
    task.load_data()
    task.unload_data()
    assert task.metadata == before, (
        f"eval_splits {task.metadata.eval_splits}, dataset {task.metadata.dataset}"
    )


@check("cache: result written, reused with only-cache")
def _():
    task = small()
    cache = mteb.ResultCache(os.path.join(tmp, "c1"))
    r = mteb.evaluate(MODEL, task, cache=cache, co2_tracker=False, show_progress_bar=False)
    path = cache.get_task_result_path(
        task.metadata.name, r.model_name.replace("/", "__"), r.model_revision
    )
    assert path.exists() and (path.parent / "model_meta.json").exists()
    again = mteb.evaluate(
        MODEL, task, cache=cache, overwrite_strategy="only-cache", show_progress_bar=False
    )
    assert abs(again[0].get_score() - r[0].get_score()) < 1e-6  # mteb saves 6 decimals


@check("overwrite_strategy='never' with an existing result returns the cached result")
def _():
    task = small()
    cache = mteb.ResultCache(os.path.join(tmp, "c2"))
    r = mteb.evaluate(MODEL, task, cache=cache, co2_tracker=False, show_progress_bar=False)
    path = cache.get_task_result_path(
        task.metadata.name, r.model_name.replace("/", "__"), r.model_revision
    )
    data = json.loads(path.read_text())
    for split in data["scores"]:
        for s in data["scores"][split]:
            s["main_score"] = 999.0
    path.write_text(json.dumps(data))
    n = mteb.evaluate(
        MODEL,
        task,
        cache=cache,
        overwrite_strategy="never",
        co2_tracker=False,
        show_progress_bar=False,
    )
    assert n[0].get_score() == 999.0


@check("overwrite_strategy='always' re-runs")
def _():
    task = small()
    cache = mteb.ResultCache(os.path.join(tmp, "c3"))
    a = mteb.evaluate(MODEL, task, cache=cache, co2_tracker=False, show_progress_bar=False)[
        0
    ].get_score()
    b = mteb.evaluate(
        MODEL,
        task,
        cache=cache,
        overwrite_strategy="always",
        co2_tracker=False,
        show_progress_bar=False,
    )[0].get_score()
    assert a == b


@check("preloaded data survives evaluate; task.dataset['test'] is the split")
def _():
    task = small()
    task.load_data()
    mteb.evaluate(MODEL, task, cache=None, co2_tracker=False, show_progress_bar=False)
    _ = task.dataset["test"]
    mteb.evaluate(MODEL, task, cache=None, co2_tracker=False, show_progress_bar=False)
    _ = task.dataset["test"]


@check(
    "a model with a stub tokenizer (mteb's MockSentenceTransformer shape): one clear line, not IndexError"
)
def _():
    try:
        mteb.evaluate(
            StubTokenizerModel(), small(), cache=None, co2_tracker=False, show_progress_bar=False
        )
    except IndexError:
        raise
    except (TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    raise AssertionError("no error")


@check(
    "results round trip: TaskResult to_disk/from_disk, ResultCache.load_results(tasks=[task], validate_and_filter=True)"
)
def _():
    task = small()
    cache = mteb.ResultCache(os.path.join(tmp, "c4"))
    r = mteb.evaluate(MODEL, task, cache=cache, co2_tracker=False, show_progress_bar=False)[0]
    r.to_disk(Path(tmp) / "r.json")
    back = mteb.TaskResult.from_disk(Path(tmp) / "r.json")
    assert abs(back.get_score() - r.get_score()) < 1e-6
    loaded = cache.load_results(
        tasks=[task], validate_and_filter=True, include_remote=False, require_model_meta=False
    )
    assert abs(loaded.model_results[0].task_results[0].get_score() - r.get_score()) < 1e-6


@check("results by name: TaskResult.task_type, validate_and_filter_scores() without a task")
def _():
    task = small()
    r = mteb.evaluate(MODEL, task, cache=None, co2_tracker=False, show_progress_bar=False)[0]
    t = r.task_type
    r.validate_and_filter_scores()
    return t


@check("mteb.get_task('STSBContext')")
def _():
    mteb.get_task("STSBContext")
