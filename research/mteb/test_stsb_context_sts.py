"""The upstream-ready STSBContext (tasks/sts/eng/stsb_context_sts.py) against the checks mteb runs on every task it
ships: metadata filled and valid, descriptive statistics present (at the path they take inside mteb), a unique name,
the citation in mteb's BibTeX format, data quality, and ``mteb.evaluate`` with mteb's own random baseline model.

    pytest research/mteb
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

mteb = pytest.importorskip("mteb")

from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "stsb_context_sample.tsv"
SHIPPED = ROOT / "slice_st" / "integrations" / "stsb_context_stats.json"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


upstream = _load("stsb_context_sts", HERE / "tasks" / "sts" / "eng" / "stsb_context_sts.py")
hub_format = _load("stsb_context_hub_format", HERE / "hub_format.py")


@pytest.fixture
def stats_where_mteb_keeps_them(monkeypatch):
    """mteb reads a task's statistics from ``mteb/descriptive_stats/<type>/<name>.json`` inside its package; this
    folder mirrors that layout, so the check reads them as it would once they are copied there."""
    monkeypatch.setattr(
        TaskMetadata,
        "descriptive_stat_path",
        property(lambda meta: HERE / "descriptive_stats" / str(meta.type) / f"{meta.name}.json"),
    )


@pytest.fixture
def task():
    """The upstream task with the fixture file as its data, in the columns the Hub copy has."""
    task = upstream.STSBContextSTS()
    task.dataset = hub_format.to_mteb_columns(FIXTURE)
    task.data_loaded = True
    return task


def test_metadata_is_filled_and_valid_with_descriptive_statistics(stats_where_mteb_keeps_them):
    task = upstream.STSBContextSTS()
    meta = task.metadata
    meta._validate_metadata()
    assert meta.is_filled()
    assert meta.dataset.get("trust_remote_code", False) is False
    assert isinstance(meta.simplified_task_type, str)
    assert meta.descriptive_stats is not None and meta.n_samples == {"test": 512}
    assert not isinstance(meta.prompt, dict)


def test_name_is_new_to_mteb():
    names = {
        t.metadata.name for t in mteb.get_tasks(exclude_superseded=False, exclude_aggregate=False)
    }
    assert upstream.STSBContextSTS.metadata.name not in names


def test_citation_is_in_mtebs_bibtex_format():
    bibtexparser = pytest.importorskip("bibtexparser")
    from bibtexparser.bwriter import BibTexWriter

    citation = upstream.STSBContextSTS.metadata.bibtex_citation.strip()
    parser = bibtexparser.bparser.BibTexParser(
        common_strings=True, ignore_nonstandard_types=False, interpolate_strings=False
    )
    writer = BibTexWriter()
    writer.indent, writer.comma_first, writer.add_trailing_comma = "  ", False, True
    assert writer.write(bibtexparser.loads(citation, parser)).strip() == citation


def test_it_describes_the_same_data_as_slice_sts_task():
    """The upstream copy stands alone (mteb cannot import slice-st): what both say of the data is kept in step."""
    from slice_st.integrations.mteb import STSBContext

    ours, theirs = STSBContext.metadata, upstream.STSBContextSTS.metadata
    for field in (
        "name",
        "type",
        "main_score",
        "eval_splits",
        "eval_langs",
        "bibtex_citation",
        "reference",
        "date",
    ):
        assert getattr(theirs, field) == getattr(ours, field), field


def test_statistics_match_slice_sts_and_pass_mtebs_quality_checks():
    stats = json.loads((HERE / "descriptive_stats" / "STS" / "STSBContext.json").read_text())
    assert stats == json.loads(SHIPPED.read_text())  # one computation, two places: kept in step
    split = stats["test"]
    for side in ("text1_statistics", "text2_statistics"):
        assert split[side]["min_text_length"] > 3
        assert split[side]["max_text_length"] <= 50 * split[side]["average_text_length"]
    assert split["unique_pairs"] >= 0.99 * split["num_samples"]


def test_statistics_are_computed_by_mteb_from_the_hub_columns(task):
    computed = task._calculate_descriptive_statistics_from_split("test")
    shipped = json.loads(SHIPPED.read_text())["test"]
    assert set(computed) == set(shipped) and computed["num_samples"] == 8


def test_evaluates_twice_with_mtebs_random_baseline(task):
    model = mteb.get_model("mteb/baseline-random-encoder")
    scores = []
    for _ in range(2):
        [result] = mteb.evaluate(
            model, task, cache=None, co2_tracker=False, show_progress_bar=False
        )
        assert result.task_name == "STSBContext" and set(result.eval_splits) == set(
            task.eval_splits
        ) == {"test"}
        scores.append(result.get_score())
    assert scores[0] == scores[1] and -1 <= scores[0] <= 1
