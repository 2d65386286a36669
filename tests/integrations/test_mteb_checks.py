"""STSBContext against the checks mteb applies to the tasks it ships, and mteb's life cycle of a task object.

Each test asserts what one of mteb's own checks asserts (metadata filled and valid with descriptive statistics,
``calculate_descriptive_statistics()``, ``mteb.evaluate`` on one object twice, the cache and its overwrite
strategies, preloaded data, results read back), written for this task: the task is built on a small file, the
model is the tiny random BERT of tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

mteb = pytest.importorskip("mteb")

from slice_st.data import read_stsb_context  # noqa: E402
from slice_st.integrations.mteb import (  # noqa: E402
    DATA_ENV,
    SPLIT,
    STATS_REVISION,
    STSBContext,
    mteb_model,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "stsb_context_sample.tsv"
QUIET = {"show_progress_bar": False, "co2_tracker": False}


def assert_mteb_metadata_checks(task) -> None:
    """What mteb checks of the metadata of every task it ships."""
    meta = task.metadata
    meta._validate_metadata()
    assert meta.is_filled()
    assert meta.dataset.get("trust_remote_code", False) is False
    assert isinstance(meta.simplified_task_type, str)
    assert meta.descriptive_stats is not None and meta.n_samples is not None
    assert not isinstance(meta.prompt, dict)


@pytest.fixture
def own_file(tmp_path) -> Path:
    """The fixture file copied into a folder of the test's own (statistics are written beside it)."""
    path = tmp_path / "data" / "stsb-context.tsv"
    path.parent.mkdir()
    shutil.copy(FIXTURE, path)
    return path


@pytest.fixture(scope="module")
def model(tiny_model):
    return mteb_model(tiny_model)


def test_the_class_passes_mtebs_metadata_checks_with_its_shipped_statistics():
    assert_mteb_metadata_checks(STSBContext)
    stats = STSBContext.metadata.descriptive_stats
    assert STSBContext.metadata.n_samples == {SPLIT: 512} and list(stats) == [SPLIT]
    assert STSBContext.metadata.revision == STATS_REVISION
    split = stats[SPLIT]
    assert split["unique_pairs"] == 512 and split["text2_statistics"]["unique_texts"] == 512
    assert (
        0 <= split["label_statistics"]["min_score"] <= split["label_statistics"]["max_score"] <= 5
    )
    assert split["number_of_characters"] == (
        split["text1_statistics"]["total_text_length"]
        + split["text2_statistics"]["total_text_length"]
    )


def test_mtebs_quality_checks_on_the_shipped_statistics():
    """mteb's data-quality checks: no near-empty texts, no text 50x the average, under 1% duplicate pairs."""
    split = STSBContext.metadata.descriptive_stats[SPLIT]
    for side in ("text1_statistics", "text2_statistics"):
        stats = split[side]
        assert (
            stats["min_text_length"] > 3
            and stats["max_text_length"] <= 50 * stats["average_text_length"]
        )
    assert split["unique_pairs"] >= 0.99 * split["num_samples"]


def test_calculate_descriptive_statistics_for_a_file_of_ones_own(own_file):
    """mteb's documented way (``calculate_descriptive_statistics()``) runs on the task's layout, writes beside the
    file (never into an installed package), and the metadata checks then pass for that file."""
    task = STSBContext(own_file)
    assert task.metadata.descriptive_stats is None  # not the shipped file's: nothing claimed
    stats = task.calculate_descriptive_statistics()
    rows = read_stsb_context(FIXTURE)
    assert stats[SPLIT]["num_samples"] == len(rows) == 8
    assert stats[SPLIT]["number_of_characters"] == sum(
        len(row["line"]) + len(row["passage"]) for row in rows
    )
    assert stats[SPLIT]["label_statistics"]["max_score"] == max(rows["goldsim"])
    written = own_file.parent / f"stsb-context.tsv.stats-{task.metadata.revision}.json"
    assert sorted(p.name for p in own_file.parent.iterdir()) == sorted(
        [own_file.name, written.name]
    )
    assert json.loads(written.read_text()) == json.loads(json.dumps(stats))
    again = STSBContext(own_file)
    assert_mteb_metadata_checks(again)
    assert again.metadata.n_samples == {SPLIT: 8}
    assert set(again.metadata.descriptive_stats[SPLIT]) == set(
        STSBContext.metadata.descriptive_stats[SPLIT]
    )
    own_file.write_bytes(own_file.read_bytes() + own_file.read_bytes().splitlines(keepends=True)[1])
    assert (
        STSBContext(own_file).metadata.descriptive_stats is None
    )  # an edited file never reads stale statistics


def test_a_sample_has_statistics_of_its_own(own_file):
    task = STSBContext(own_file, limit=4)
    assert task.calculate_descriptive_statistics()[SPLIT]["num_samples"] == 4
    assert STSBContext(own_file, limit=4).metadata.n_samples == {SPLIT: 4}
    assert STSBContext(own_file).metadata.descriptive_stats is None


def test_a_url_has_no_statistics_and_says_why():
    task = STSBContext("https://example.org/stsb-context.tsv")
    assert task.metadata.descriptive_stats is None and task.metadata.revision == "unknown"
    with pytest.raises(ValueError, match="beside a local file"):
        _ = task.metadata.descriptive_stat_path


def test_the_shipped_statistics_are_mtebs_calculation_on_the_dev_half():
    """Recomputed from the file they describe when it is at hand (SLICE_ST_STSB_CONTEXT)."""
    path = os.environ.get(DATA_ENV)
    if (
        not path
        or not os.path.isfile(path)
        or STSBContext(path).metadata.revision != STATS_REVISION
    ):
        pytest.skip(
            f"{DATA_ENV} does not name the dev half of STS-B-Context (revision {STATS_REVISION})"
        )
    task = STSBContext(path)
    task.load_data()
    computed = {SPLIT: task._calculate_descriptive_statistics_from_split(SPLIT)}
    assert json.loads(json.dumps(computed)) == STSBContext.metadata.descriptive_stats


def test_evaluate_twice_on_one_object(model):
    task = STSBContext(FIXTURE, max_span=6)
    metadata = task.metadata
    first = mteb.evaluate(model, task, cache=None, **QUIET)
    assert (
        task.data_loaded is False and task.metadata == metadata
    )  # unloaded, still the file's metadata
    second = mteb.evaluate(model, task, cache=None, **QUIET)
    for results in (first, second):
        assert len(results) == 1 and results[0].task_name == "STSBContext"
        assert (
            set(results[0].eval_splits)
            == set(task.eval_splits)
            == set(task.metadata.eval_splits)
            == {SPLIT}
        )
    assert first[0].get_score() == second[0].get_score()
    assert -1 <= first[0].get_score() <= 1


def test_metadata_stays_the_files_after_unload_data():
    task = STSBContext(FIXTURE, limit=4, source="released")
    metadata = task.metadata
    task.load_data()
    task.unload_data()
    assert task.metadata is metadata and task.dataset is None and not task.data_loaded
    assert task.metadata.revision.endswith(
        "-limit4-seed0"
    ) and task.metadata.sample_creation.startswith("LM")


def test_preloaded_data_stays_across_evaluations(model):
    task = STSBContext(FIXTURE, max_span=6)
    task.load_data()
    scores = []
    for _ in range(2):
        scores.append(mteb.evaluate(model, task, cache=None, **QUIET)[0].get_score())
        assert task.data_loaded and len(task.dataset[SPLIT]) == 8
    assert scores[0] == scores[1]


def _result_path(cache, task, results) -> Path:
    return cache.get_task_result_path(
        task.metadata.name, results.model_name.replace("/", "__"), results.model_revision
    )


def test_cache_and_overwrite_strategies(model, tmp_path):
    task = STSBContext(FIXTURE, max_span=6)
    cache = mteb.ResultCache(tmp_path)
    results = mteb.evaluate(model, task, cache=cache, **QUIET)
    score = results[0].get_score()
    path = _result_path(cache, task, results)
    assert path.is_file() and path.suffix == ".json" and (path.parent / "model_meta.json").is_file()

    cached = mteb.evaluate(model, task, cache=cache, overwrite_strategy="only-cache", **QUIET)
    assert cached[0].get_score() == pytest.approx(score, abs=1e-6)  # mteb saves 6 decimals

    data = json.loads(path.read_text())
    for split in data["scores"].values():
        for subset in split:
            subset["main_score"] = 999.0
    path.write_text(json.dumps(data))
    mtime = path.stat().st_mtime_ns
    never = mteb.evaluate(model, task, cache=cache, overwrite_strategy="never", **QUIET)
    assert (
        never[0].get_score() == 999.0 and path.stat().st_mtime_ns == mtime
    )  # read, not re-run nor rewritten

    always = mteb.evaluate(model, task, cache=cache, overwrite_strategy="always", **QUIET)
    assert always[0].get_score() == pytest.approx(score)
    assert json.loads(path.read_text())["scores"][SPLIT][0]["main_score"] == pytest.approx(
        score, abs=1e-6
    )

    empty = mteb.ResultCache(tmp_path / "empty")
    first_time = mteb.evaluate(model, task, cache=empty, overwrite_strategy="never", **QUIET)
    assert _result_path(empty, task, first_time).is_file()


def test_results_round_trip_through_mtebs_task_result(model, tmp_path):
    task = STSBContext(FIXTURE, max_span=6)
    result = mteb.evaluate(model, task, cache=None, **QUIET)[0]
    result.to_disk(tmp_path / "STSBContext.json")
    back = mteb.TaskResult.from_disk(tmp_path / "STSBContext.json")
    assert (
        back.get_score() == pytest.approx(result.get_score(), abs=1e-6)
        and back.task_name == "STSBContext"
    )
    assert back.validate_and_filter_scores(task=task).scores.keys() == {SPLIT}
    assert back.dataset_revision == task.metadata.revision


def test_results_are_read_back_through_mteb_with_the_task_object(model, tmp_path):
    """mteb's ResultCache reads a task defined outside mteb given the task object; the revision tells files apart."""
    folder = tmp_path / "results-cache"
    task = STSBContext(FIXTURE, max_span=6)
    score = mteb.evaluate(model, task, cache=mteb.ResultCache(folder), **QUIET)[0].get_score()

    def load(task, **options):
        options |= {
            "include_remote": False,
            "require_model_meta": False,
            "validate_and_filter": True,
        }
        loaded = mteb.ResultCache(folder).load_results(tasks=[task], **options)
        revision = task.metadata.revision
        return [
            r
            for m in loaded.model_results
            for r in m.task_results
            if r.dataset_revision == revision
        ]

    [result] = load(task)
    assert isinstance(result, mteb.TaskResult) and result.get_score() == pytest.approx(
        score, abs=1e-6
    )
    assert list(result.scores) == [SPLIT] and load(task, models=["nobody/else"]) == []
    other = STSBContext(FIXTURE, limit=4, max_span=6)  # another sample: another dataset revision
    assert load(other) == []  # never another file's scores
    mteb.evaluate(
        model, other, cache=mteb.ResultCache(folder), overwrite_strategy="always", **QUIET
    )
    assert load(task) == [] and [r.dataset_revision for r in load(other)] == [
        other.metadata.revision
    ]


def test_mteb_run_refuses_a_cached_result_of_another_file(tiny_model_dir, tmp_path, capsys):
    """mteb finds a cached result by task name and model alone: another file's scores would come back."""
    from slice_st.cli import main

    out = tmp_path / "results"
    command = [
        "mteb",
        "run",
        "-m",
        tiny_model_dir,
        "--stsb-context",
        str(FIXTURE),
        "--output-folder",
        str(out),
    ]
    quiet = ["--max-span", "6", "--no-progress"]
    assert main([*command, *quiet]) == 0
    capsys.readouterr()
    for strategy in ("only-missing", "never"):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "--limit", "4", *quiet, "--overwrite-strategy", strategy])
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert (
            exit_info.value.code == 2
            and "holds STSBContext results of another file or sample" in error
        )
    assert main([*command, "--limit", "4", *quiet, "--overwrite-strategy", "always"]) == 0
    [saved] = out.rglob("STSBContext.json")
    assert (
        json.loads(saved.read_text())["dataset_revision"]
        == STSBContext(FIXTURE, limit=4).metadata.revision
    )


def test_mteb_cannot_look_the_task_up_by_name(model):
    """mteb's registry holds only the tasks mteb ships: results are read back with the task object."""
    result = mteb.evaluate(model, STSBContext(FIXTURE, max_span=6), cache=None, **QUIET)[0]
    with pytest.raises(KeyError, match="STSBContext"):
        _ = result.task_type
    with pytest.raises(KeyError, match="STSBContext"):
        mteb.get_task("STSBContext")


def test_a_static_embedding_model_gets_one_line(tiny_model_dir):
    """A real sentence-transformers model without token vectors (static embeddings)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(tiny_model_dir, "tokenizer.json"))
    static = SentenceTransformer(
        modules=[StaticEmbedding(tokenizer, embedding_dim=8)], device="cpu"
    )
    with pytest.raises(TypeError) as error:
        mteb.evaluate(static, STSBContext(FIXTURE, max_span=6), cache=None, **QUIET)
    message = str(error.value)
    assert (
        "\n" not in message
        and "needs a sentence-transformers model whose first module is a transformer" in message
    )
    assert message.endswith("its first module is a StaticEmbedding.")


def test_mtebs_stub_tokenizer_test_model_gets_one_line():
    """The shape of the model mteb's own tests evaluate with (tests/mock_models.py, MockSentenceTransformer): a
    SentenceTransformer with no modules, whose encode returns seeded random vectors."""
    import numpy as np
    from sentence_transformers import SentenceTransformer, SentenceTransformerModelCardData

    class MockSentenceTransformer(SentenceTransformer):
        model_card_data = SentenceTransformerModelCardData(
            model_name="mock/MockSentenceTransformer"
        )
        prompts = {}

        def __init__(self):
            self._modules = {}

        def encode(self, inputs, **kwargs):
            return np.random.RandomState(42).randn(len(inputs), 10)

        @staticmethod
        def get_sentence_embedding_dimension() -> int:
            return 10

        def max_seq_length(self) -> int:
            return 10

        @property
        def similarity_fn_name(self) -> str:
            return "cosine"

    with pytest.raises(
        TypeError,
        match="whose first module is a transformer with a fast tokenizer; it has no modules",
    ):
        mteb.evaluate(MockSentenceTransformer(), STSBContext(FIXTURE), cache=None, **QUIET)
