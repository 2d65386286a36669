"""The STSBContext mteb task and `slice-st mteb run` (slice_st.integrations.mteb): mteb's public API only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

mteb = pytest.importorskip("mteb")

from helpers import cli_fails  # noqa: E402

from research.context import main as make_context_main  # noqa: E402
from slice_st.cli import main  # noqa: E402
from slice_st.integrations.mteb import DATA_ENV, SPLIT, STSBContext, mteb_model  # noqa: E402

FIXTURE = Path(__file__).parents[1] / "fixtures" / "stsb_context_sample.tsv"


def test_metadata_is_honest(tmp_path):
    meta = STSBContext.metadata
    assert meta.type == "STS" and meta.main_score == "cosine_spearman"
    assert "2405.07263" in meta.bibtex_citation and meta.license == "not specified"
    unknown = STSBContext(FIXTURE).metadata  # no note beside it: its origin is not claimed
    assert unknown.sample_creation == "found" and "origin is not recorded" in unknown.description
    released = STSBContext(FIXTURE, source="released").metadata
    assert (
        released.sample_creation == "LM-generated and verified"
        and "language model" in released.description
    )


def test_make_context_output_is_described_as_glued_sentences(tmp_path, capsys):
    """A `make-context` file is glued STS-B sentences: never "LM-generated"."""
    stsb = tmp_path / "sts.csv"
    rows = [
        ("A man plays a guitar.", "A man is playing the guitar.", 4.8),
        ("A dog runs.", "The dog is running.", 4.5),
        ("A woman cooks.", "Someone is cooking food.", 3.9),
        ("Kids play.", "Children are playing outside now.", 3.2),
        ("Rain falls.", "It is raining hard today.", 4.0),
        ("A cat sleeps.", "The cat is sleeping on a sofa.", 4.1),
    ]
    stsb.write_text(
        "".join(
            f"main-captions\tMSRvid\t2012\t{i:04d}\t{score}\t{a}\t{b}\n"
            for i, (a, b, score) in enumerate(rows)
        )
    )
    out = tmp_path / "dev.tsv"
    assert make_context_main([str(stsb), "-o", str(out), "--words", "12"]) == 0
    meta = STSBContext(out).metadata
    assert (
        meta.sample_creation == "created"
        and "make-context" in meta.description
        and "LM-generated" not in meta.description
    )


def test_evaluate_from_python_has_a_model_name_and_revision(tiny_model, tmp_path):
    task = STSBContext(FIXTURE, max_span=6)
    result = mteb.evaluate(
        mteb_model(tiny_model),
        [task],
        cache=mteb.ResultCache(str(tmp_path)),
        show_progress_bar=False,
        co2_tracker=False,
    )
    scores = result.task_results[0].scores["test"][0]
    assert scores["main_score"] == scores["cosine_spearman"] == scores["spearman"]
    assert -1 <= scores["cosine_pearson"] <= 1 and "full_context_cosine_spearman" in scores
    assert scores["max_span"] == 6 and scores["pairs"] == 8
    assert result.model_name.startswith("local/") and "no_model_name" not in result.model_name
    from slice_st.loading import model_fingerprint

    assert result.model_revision == model_fingerprint(tiny_model)
    saved = list(tmp_path.rglob("STSBContext.json"))
    assert len(saved) == 1 and "no_revision_available" not in str(saved[0])


def test_limit_is_a_seeded_sample_with_its_own_revision():
    task = STSBContext(FIXTURE, limit=4)
    task.load_data()
    assert len(task.dataset["test"]) == 4
    assert task.metadata.dataset["revision"].endswith("-limit4-seed0")
    with pytest.raises(ValueError, match="limit"):
        STSBContext(FIXTURE, limit=2)


def test_missing_data_is_a_clear_error(monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match="STSBContext needs the STS-B-Context TSV"):
        STSBContext().load_data()


def test_cli_runs_mteb_evaluate_without_patching_mteb(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv(DATA_ENV, raising=False)
    get_model, registry = mteb.get_model, dict(vars(mteb))
    model_dir = tmp_path / "runA" / "final"
    shutil.copytree(tiny_model_dir, model_dir)
    out = tmp_path / "results"
    code = main(
        [
            "mteb",
            "run",
            "-t",
            "STSBContext",
            "-m",
            str(model_dir),
            "--stsb-context",
            str(FIXTURE),
            "--limit",
            "6",
            "--output-folder",
            str(out),
            "--batch-size",
            "8",
            "--max-span",
            "6",
            "--no-progress",
        ]
    )
    assert code == 0
    files = list(out.rglob("STSBContext.json"))
    assert len(files) == 1
    model_folder, revision = files[0].parent.parent.name, files[0].parent.name
    assert (
        model_folder == "local__runA-final" and len(revision) == 16
    )  # mteb's layout: results/<model>/<revision>/
    scores = json.loads(files[0].read_text())["scores"]["test"][0]
    assert scores["pairs"] == 6 and "cosine_spearman" in scores
    printed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert printed["task"] == "STSBContext" and printed["model"] == "local/runA-final"
    assert (
        mteb.get_model is get_model and dict(vars(mteb)).keys() == registry.keys()
    )  # nothing patched
    with pytest.raises(KeyError):
        mteb.get_task("STSBContext")  # mteb's own registry is left alone


def test_cli_errors_are_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["mteb", "run", "--stsb-context", str(tmp_path / "missing.tsv")])
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr().err.strip().splitlines()[-1]
        == f"slice-st: error: --stsb-context: file not found: {tmp_path / 'missing.tsv'}"
    )
    run = ("mteb", "run", "--stsb-context", FIXTURE, "--output-folder", tmp_path / "out")
    assert "limit must be an integer >= 4" in cli_fails(capsys, *run, "--limit", "2")
    assert cli_fails(capsys, *run, "-t", "STS12", "--limit", "5").endswith(
        "applies to the STSBContext task only."
    )
    assert cli_fails(capsys, *run, "-t", "NoSuchTask").endswith("unknown mteb task 'NoSuchTask'.")
    assert "min_span (5) must be <= max_span (2)" in cli_fails(
        capsys, *run, "--min-span", "5", "--max-span", "2"
    )
    assert not (tmp_path / "out").exists()


def test_one_split_whatever_the_file(tiny_model, tmp_path):
    """One split name in the class, the instance, the results: a dev-named file is still split "test" (its file and
    sample are the result's dataset_revision)."""
    dev = tmp_path / "stsb-context-dev.tsv"
    shutil.copy(FIXTURE, dev)
    task = STSBContext(dev, max_span=6)
    assert (
        STSBContext.metadata.eval_splits
        == task.metadata.eval_splits
        == list(task.eval_splits)
        == [SPLIT]
    )
    assert SPLIT == "test"
    result = mteb.evaluate(
        mteb_model(tiny_model),
        [task],
        cache=mteb.ResultCache(str(tmp_path / "out")),
        show_progress_bar=False,
        co2_tracker=False,
    )
    assert list(result.task_results[0].scores) == ["test"]
    saved = json.loads(next((tmp_path / "out").rglob("STSBContext.json")).read_text())
    assert list(saved["scores"]) == ["test"] and saved["dataset_revision"] == task.metadata.revision
    assert (
        STSBContext(FIXTURE).metadata.revision == task.metadata.revision
    )  # same bytes, same revision
    with pytest.raises(TypeError, match="split"):
        STSBContext(FIXTURE, split="dev")


def test_model_meta_has_licence_base_and_size(tiny_model):
    import slice_st

    meta = mteb_model(slice_st.load_model()).mteb_model_meta
    assert (
        meta.license == "cc-by-sa-4.0"
        and meta.adapted_from == "sentence-transformers/all-MiniLM-L6-v2"
    )
    assert meta.n_parameters == 22_713_216 and meta.name == "slice-st/slice-minilm"
    base = mteb_model(slice_st.load_model("base")).mteb_model_meta
    assert base.license == "apache-2.0" and base.adapted_from is None
    tiny = mteb_model(tiny_model).mteb_model_meta
    assert (
        tiny.n_parameters == sum(p.numel() for p in tiny_model.parameters())
        and tiny.license == "not specified"
    )


def test_offline_hub_task_and_file_as_output_folder_are_one_line(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    import slice_st

    loaded, real = (
        [],
        slice_st.loading.load_model,
    )  # the package's lazy name could resolve to the patch
    monkeypatch.setattr(
        slice_st.loading,
        "load_model",
        lambda *a, **k: loaded.append(a) or real(tiny_model_dir),
    )
    a_file = tmp_path / "results"
    a_file.write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "mteb",
                "run",
                "-t",
                "STSBContext",
                "--stsb-context",
                str(FIXTURE),
                "--output-folder",
                str(a_file),
            ]
        )
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in error
    assert (
        error.strip().splitlines()[-1]
        == f"slice-st: error: --output-folder {a_file} is a file, not a folder."
    )
    assert loaded == []  # said before the model was loaded or anything evaluated
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "mteb",
                "run",
                "-t",
                "STSBenchmark",
                "--output-folder",
                str(tmp_path / "out"),
                "--no-progress",
            ]
        )
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in error, error
    assert (
        "the data of mteb task(s) STSBenchmark is not available here"
        in error.strip().splitlines()[-1]
    )


def test_mteb_run_hides_only_the_renamed_method_warnings_mteb_causes():
    """ST 6's FutureWarning for a method mteb still calls by its old name is hidden around our mteb calls; another
    FutureWarning, or the same one from elsewhere, still shows."""
    import warnings

    from slice_st.integrations import mteb as integration

    renamed = "The `get_sentence_embedding_dimension` method has been renamed to `get_embedding_dimension`."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with integration._without_renamed_method_warnings():
            warnings.warn_explicit(
                renamed, FutureWarning, "model_meta.py", 1, module="mteb.models.model_meta"
            )
            warnings.warn_explicit(
                "something else", FutureWarning, "model_meta.py", 2, module="mteb.models.model_meta"
            )
            warnings.warn_explicit(renamed, FutureWarning, "mine.py", 3, module="my_code")
    assert [str(w.message) for w in caught] == ["something else", renamed]
