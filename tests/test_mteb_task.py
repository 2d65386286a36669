"""The STSBContext mteb task and the `slice-st mteb` pass-through (slice_st.integrations.mteb)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

mteb = pytest.importorskip("mteb")

from slice_st.cli import main  # noqa: E402
from slice_st.integrations.mteb import DATA_ENV, STSBContext, _pop_option, register_tasks  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "stsb_context_sample.tsv"


def test_metadata_is_honest():
    meta = STSBContext.metadata
    assert meta.type == "STS" and meta.main_score == "cosine_spearman"
    assert "2405.07263" in meta.bibtex_citation and meta.license == "not specified"


def test_evaluate_from_python(tiny_model):
    task = STSBContext(FIXTURE, max_span=6)
    result = mteb.evaluate(tiny_model, [task], cache=None, show_progress_bar=False)
    scores = result.task_results[0].scores["test"][0]
    assert scores["main_score"] == scores["cosine_spearman"] == scores["spearman"]
    assert -1 <= scores["cosine_pearson"] <= 1 and "full_context_cosine_spearman" in scores
    assert scores["max_span"] == 6


def test_missing_data_is_a_clear_error(monkeypatch, tiny_model):
    monkeypatch.delenv(DATA_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match="STSBContext needs the STS-B-Context TSV"):
        STSBContext().load_data()


def test_registered_for_mteb_lookups():
    register_tasks()
    register_tasks()  # idempotent
    assert isinstance(mteb.get_task("STSBContext"), STSBContext)
    assert [type(t) for t in mteb.get_tasks(tasks=["STSBContext"])] == [STSBContext]


def test_pop_option():
    argv = ["run", "--stsb-context", "a.tsv", "-t", "X"]
    assert _pop_option(argv, "--stsb-context") == "a.tsv" and argv == ["run", "-t", "X"]
    argv = ["run", "--stsb-context=b.tsv"]
    assert _pop_option(argv, "--stsb-context") == "b.tsv" and argv == ["run"]


def test_cli_pass_through_with_a_local_model_path(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    out = tmp_path / "results"
    code = main(["mteb", "run", "-t", "STSBContext", "-m", tiny_model_dir, "--stsb-context", str(FIXTURE),
                 "--output-folder", str(out), "--batch-size", "8", "-v", "0", "--no-co2-tracker"])
    assert code == 0
    files = list(out.rglob("STSBContext.json"))
    assert len(files) == 1
    assert files[0].parent.parent.name.startswith("local__")  # mteb's layout: results/<model>/<revision>/
    scores = json.loads(files[0].read_text())["scores"]["test"][0]
    assert "cosine_spearman" in scores
