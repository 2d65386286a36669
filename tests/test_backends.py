"""Span encoding on ONNX Runtime and OpenVINO (slice-st[onnx], [openvino]), int8 exports, half precision.

The tiny BERT of conftest.py is exported once per session (cached in tmp). Offsets, units, windows
and span settings must be exactly the torch ones; vectors agree to ``FP32_TOLERANCE`` (ONNX Runtime
and OpenVINO in float32) and ``INT8_TOLERANCE`` for cosine scores of the dynamic-int8 model.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import slice_st
from slice_st.backends import backend_of, default_threads
from slice_st.errors import MissingExtraError

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("onnxruntime", "onnx", "onnxscript")),
    reason="needs slice-st[onnx]",
)
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None

FP32_TOLERANCE = 1e-4  # |score_onnx - score_torch|, |vector difference| (float32 runtimes)
INT8_TOLERANCE = 0.05  # |score_int8 - score_torch| for cosines of the dynamic-int8 tiny model
TEXTS = [
    "Customer: My son plays the guitar and wants to bring it on board as hand luggage.",
    "Agent: I'm sorry about that, the departure got delayed because of the storm in Chicago.",
    "  Café naïve résumé!  😀 don't   e.g. 3.14 $5 — “quotes” internationalization  ",
    "short",
    "",
    " ".join(f"word{i} is here" for i in range(40)),  # long: several windows with the short model
]
QUERIES = ["a man plays the guitar", "the flight was delayed", "word7 is"]
SPAN_SETTINGS = {"min_span": 1, "max_span": 6, "unit": "word"}


@pytest.fixture(scope="session")
def export_dir(make_tiny_model, tmp_path_factory) -> str:
    """The tiny model saved with span settings, plus onnx/model.onnx, its int8 twin and (if installed) OpenVINO."""
    folder = tmp_path_factory.mktemp("tiny_export")
    model = make_tiny_model(128)
    slice_st.set_span_config(model, **SPAN_SETTINGS)
    slice_st.export_model(model, str(folder), backend="onnx")
    slice_st.export_model(model, str(folder), backend="onnx", quantize="avx512_vnni")
    if HAS_OPENVINO:
        slice_st.export_model(model, str(folder), backend="openvino")
    return str(folder)


@pytest.fixture(scope="session")
def torch_model(export_dir):
    return slice_st.load_model(export_dir, device="cpu")


def _load(export_dir, backend, **kwargs):
    if backend == "openvino" and not HAS_OPENVINO:
        pytest.skip("needs slice-st[openvino]")
    return slice_st.load_model(export_dir, backend=backend, threads=1, **kwargs)


BACKENDS = [
    ("onnx", {}, FP32_TOLERANCE),
    ("openvino", {}, FP32_TOLERANCE),
    ("onnx", {"quantized": True}, INT8_TOLERANCE),
]
IDS = ["onnx", "openvino", "onnx-int8"]


def test_export_layout_and_cache(export_dir):
    folder = Path(export_dir)
    files = {
        "onnx": sorted(p.relative_to(folder).as_posix() for p in (folder / "onnx").glob("*.onnx")),
        "openvino": sorted(
            p.relative_to(folder).as_posix() for p in (folder / "openvino").glob("*.xml")
        ),
    }
    assert (
        "onnx/model.onnx" in files["onnx"] and "onnx/model_qint8_avx512_vnni.onnx" in files["onnx"]
    )
    assert files["openvino"] == (["openvino/openvino_model.xml"] if HAS_OPENVINO else [])
    # a second export is the cached file, not a new export
    before = (
        sorted(files["onnx"]),
        [
            p.stat().st_mtime_ns
            for p in sorted((__import__("pathlib").Path(export_dir) / "onnx").glob("*.onnx"))
        ],
    )
    assert slice_st.export_model(export_dir, export_dir, backend="onnx").endswith("onnx/model.onnx")
    after = [
        p.stat().st_mtime_ns
        for p in sorted((__import__("pathlib").Path(export_dir) / "onnx").glob("*.onnx"))
    ]
    assert before[1] == after


@pytest.mark.parametrize(("backend", "options", "tolerance"), BACKENDS, ids=IDS)
@pytest.mark.parametrize("window", [128, 24], ids=["one-window", "windows"])
def test_encode_spans_match_torch(export_dir, torch_model, backend, options, tolerance, window):
    model = _load(export_dir, backend, **options)
    assert backend_of(model) == backend and backend_of(torch_model) == "torch"
    assert slice_st.get_span_config(model) == slice_st.config.SpanConfig(
        **SPAN_SETTINGS
    )  # the slice_st key of config.json
    torch_model.max_seq_length = model.max_seq_length = window
    try:
        expected = torch_model.encode_spans(TEXTS)
        got = model.encode_spans(TEXTS)
    finally:
        torch_model.max_seq_length = 128
    assert (
        max(int((g.units[:, 1] - g.units[:, 0]).max()) for g in got if len(g))
        == SPAN_SETTINGS["max_span"]
    )
    for e, g in zip(expected, got):
        assert (
            g.spans == e.spans
            and g.offsets.tolist() == e.offsets.tolist()
            and g.units.tolist() == e.units.tolist()
        )
        assert g.embeddings.dtype == np.float32
        if len(e):
            cosines = np.sum(_unit(e.embeddings) * _unit(g.embeddings), axis=1)
            assert np.all(1 - cosines <= tolerance)
            if tolerance == FP32_TOLERANCE:
                assert np.abs(g.embeddings - e.embeddings).max() <= FP32_TOLERANCE


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize(("backend", "options", "tolerance"), BACKENDS, ids=IDS)
def test_best_spans_match_torch(export_dir, torch_model, backend, options, tolerance):
    model = _load(export_dir, backend, **options)
    expected = torch_model.best_spans(QUERIES, TEXTS, top_k=3)
    got = model.best_spans(QUERIES, TEXTS, top_k=3)
    finite = np.isfinite(expected.scores)
    assert np.array_equal(finite, np.isfinite(got.scores))
    assert np.abs(got.scores[finite] - expected.scores[finite]).max() <= tolerance
    if (
        tolerance == FP32_TOLERANCE
    ):  # same spans, except where two candidates tie within the tolerance
        gaps = np.abs(np.diff(np.where(finite, expected.scores, 0), axis=2, append=-np.inf))
        clear = finite & (gaps > 2 * tolerance)
        for name in ("starts", "ends", "unit_starts", "unit_ends"):
            assert np.array_equal(getattr(got, name)[clear], getattr(expected, name)[clear])
    for match_list in got[0]:
        for match in match_list:
            assert TEXTS[match.text_index][match.start : match.end] == match.span


def test_evaluator_on_onnx(export_dir, torch_model):
    from slice_st.evaluation import SpanRetrievalEvaluator

    phrases = ["a man plays guitar", "delayed flight", "word3", "a bag", "hand luggage"]
    passages = TEXTS[:4] + [TEXTS[5]]
    evaluator = SpanRetrievalEvaluator(
        phrases,
        passages,
        [4.0, 3.0, 1.0, 2.5, 0.5],
        setups=("full", "single"),
        show_progress_bar=False,
    )
    expected = evaluator(torch_model)
    got = evaluator(_load(export_dir, "onnx"))
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-3), key


def test_index_build_add_search_and_reload(export_dir, torch_model, tmp_path):
    from slice_st import SpanIndex

    model = _load(export_dir, "onnx")
    index = SpanIndex.build(TEXTS[:3], model, ids=["a", "b", "c"], show_progress_bar=False)
    index.add(TEXTS[3:], ["d", "e", "f"], show_progress_bar=False)
    reference = SpanIndex.build(TEXTS, torch_model, ids=list("abcdef"), show_progress_bar=False)
    got, expected = index.search(QUERIES, top_k=5), reference.search(QUERIES, top_k=5)
    for g, e in zip(got, expected):
        assert [m.score for m in g] == pytest.approx([m.score for m in e], abs=FP32_TOLERANCE)
        assert {(m.doc_id, m.start, m.end) for m in g[:2]} == {
            (m.doc_id, m.start, m.end) for m in e[:2]
        }
    index.save(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["model_backend"] == "onnx" and manifest["model_file"] == "onnx/model.onnx"
    reloaded = SpanIndex.load(tmp_path / "ix")  # no model given: the same backend and file again
    assert backend_of(reloaded.model) == "onnx"
    # The same search (top_k=3): a document's places depend on top_k, and a long text's re-ranked picks with them.
    assert [m.score for m in reloaded.search(QUERIES[0], top_k=3)[0]] == pytest.approx(
        [m.score for m in index.search(QUERIES[0], top_k=3)[0]], abs=1e-6
    )
    with pytest.raises(slice_st.SpanInputError, match="another model"):
        SpanIndex.load(tmp_path / "ix", torch_model)  # torch vectors are not the ONNX file's
    with pytest.raises(slice_st.SpanInputError, match="torch backend"):
        SpanIndex.build(TEXTS[:2], model, processes=2)


def test_cli_missing_extra_is_one_line(export_dir, tmp_path, monkeypatch, capsys):
    from slice_st.cli import main

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    (tmp_path / "t.txt").write_text("a man plays the guitar\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "mine",
                "--model",
                export_dir,
                "--backend",
                "onnx",
                "-q",
                "guitar",
                str(tmp_path / "t.txt"),
            ]
        )
    assert exit_info.value.code == 2 and "pip install 'slice-st[onnx]'" in capsys.readouterr().err


def test_cli_export_mine_and_index(export_dir, tiny_model_dir, tmp_path, capsys):
    from slice_st.cli import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(t for t in TEXTS if t.strip()) + "\n", encoding="utf-8")
    assert (
        main(["export", export_dir, "-o", export_dir, "--quantize", "avx512_vnni"]) == 0
    )  # cached
    assert "model_qint8_avx512_vnni.onnx" in capsys.readouterr().out

    def mine(*extra):
        assert (
            main(
                [
                    "mine",
                    "--model",
                    export_dir,
                    "-q",
                    QUERIES[0],
                    "-q",
                    QUERIES[1],
                    "-f",
                    "jsonl",
                    str(corpus),
                    "--no-progress",
                    *extra,
                ]
            )
            == 0
        )
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    torch_rows, onnx_rows = mine(), mine("--backend", "onnx", "--threads", "1")
    assert [(r["line"], r["start"], r["end"]) for r in onnx_rows][:2] == [
        (r["line"], r["start"], r["end"]) for r in torch_rows
    ][:2]
    assert [r["score"] for r in onnx_rows] == pytest.approx(
        [r["score"] for r in torch_rows], abs=FP32_TOLERANCE
    )
    assert len(mine("--backend", "onnx", "--quantized")) == len(torch_rows)

    out_dir = tmp_path / "ix"
    assert (
        main(
            [
                "index",
                "build",
                str(corpus),
                "-o",
                str(out_dir),
                "--model",
                export_dir,
                "--backend",
                "onnx",
                "--no-progress",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(["mine", "--index", str(out_dir), "-q", QUERIES[0], "--spans", "2", "-f", "jsonl"])
        == 0
    )  # the index's default scorer, "phrase"
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["score"] == pytest.approx(torch_rows[0]["score"], abs=FP32_TOLERANCE)


def test_export_from_a_model_folder(tiny_model_dir, tmp_path, capsys):
    """`slice-st export PATH -o DIR`: the model is loaded from PATH, saved into DIR, exported beside it."""
    from slice_st.cli import main

    assert main(["export", tiny_model_dir, "-o", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.startswith(str(tmp_path / "out" / "onnx" / "model.onnx"))
    assert (tmp_path / "out" / "modules.json").is_file() and (
        tmp_path / "out" / "tokenizer.json"
    ).is_file()
    model = slice_st.load_model(str(tmp_path / "out"), backend="onnx", threads=1)
    reference = slice_st.load_model(tiny_model_dir, device="cpu")
    assert np.abs(model.encode(TEXTS) - reference.encode(TEXTS)).max() <= FP32_TOLERANCE


def test_missing_export_and_extra_are_clear(export_dir, tiny_model_dir, tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="slice-st export"):
        slice_st.load_model(tiny_model_dir, backend="onnx")
    with pytest.raises(FileNotFoundError, match="no_such.onnx"):
        slice_st.load_model(export_dir, backend="onnx", model_file="onnx/no_such.onnx")
    # export_dir: the export found there is reused, not made again
    model = slice_st.load_model(tiny_model_dir, backend="onnx", export_dir=export_dir, threads=1)
    assert backend_of(model) == "onnx"
    with pytest.raises(
        ValueError, match="holds an export of"
    ):  # a cache of another model is never reused
        slice_st.export_model(slice_st.loading.default_model_path(), export_dir)
    with pytest.raises(ValueError, match="dtype applies"):
        slice_st.load_model(export_dir, backend="onnx", dtype="bfloat16")
    with pytest.raises(ValueError, match="backend must be one of"):
        slice_st.load_model(export_dir, backend="tensorrt")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if slice-st[onnx] were not installed
    with pytest.raises(MissingExtraError, match=r"slice-st\[onnx\]"):
        slice_st.load_model(export_dir, backend="onnx")
    with pytest.raises(MissingExtraError, match=r"slice-st\[onnx\]"):
        slice_st.export_model(tiny_model_dir, tmp_path / "new")
    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(MissingExtraError, match=r"slice-st\[openvino\]"):
        slice_st.load_model(export_dir, backend="openvino", model_file="onnx/model.onnx")


def test_half_precision_on_cpu(export_dir, torch_model):
    """bf16 weights (runs on CPU; fp16 is the GPU path): token vectors in bf16, span sums and outputs in float32."""
    model = slice_st.load_model(export_dir, device="cpu", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    tokens = model.encode(TEXTS[:1], output_value="token_embeddings")[0]
    assert tokens.dtype == torch.bfloat16
    expected, got = torch_model.encode_spans(TEXTS), model.encode_spans(TEXTS)
    for e, g in zip(expected, got):
        assert g.offsets.tolist() == e.offsets.tolist() and g.embeddings.dtype == np.float32
        if len(e):
            assert np.all(np.sum(_unit(e.embeddings) * _unit(g.embeddings), axis=1) > 0.97)
    best = model.best_spans(QUERIES, TEXTS, scorer="phrase")  # the index's scorer, compared below
    assert best.scores.dtype == np.float32
    finite = np.isfinite(best.scores)
    plain = torch_model.best_spans(QUERIES, TEXTS, scorer="phrase").scores
    assert np.abs(best.scores[finite] - plain[finite]).max() < 0.05
    assert slice_st.encode.embed_texts(model, QUERIES).dtype == torch.float32
    from slice_st import SpanIndex
    from slice_st.evaluation import SpanRetrievalEvaluator

    metrics = SpanRetrievalEvaluator(
        QUERIES, TEXTS[:3], [1.0, 3.0, 2.0], setups=("full", "single"), show_progress_bar=False
    )(model)
    assert all(np.isfinite(value) for value in metrics.values())
    index = SpanIndex.build(TEXTS, model, show_progress_bar=False)
    assert index.search(QUERIES[0], top_k=1)[0][0].score == pytest.approx(
        float(best.scores[0].max()), abs=1e-3
    )  # same scorer


@pytest.mark.parametrize(
    ("capability", "attention"), [("AVX512", "sdpa"), ("AVX2", "eager"), ("DEFAULT", "eager")]
)
def test_half_precision_on_cpu_below_avx512_kernels_uses_eager_attention(
    export_dir, monkeypatch, capability, attention
):
    """torch's fused CPU attention in bf16 needs its AVX-512 kernels on an AMX machine (pack_vnni2): with the kernels
    capped below AVX-512 a half-precision load on CPU takes eager attention instead; float32 and GPUs are unchanged."""
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    model = slice_st.load_model(export_dir, device="cpu", dtype="bfloat16")
    assert model[0].auto_model.config._attn_implementation == attention
    assert model.encode_spans(TEXTS[:1])[0].embeddings.dtype == np.float32
    assert (
        slice_st.load_model(export_dir, device="cpu")[0].auto_model.config._attn_implementation
        == "sdpa"
    )
    kwargs = slice_st.backends.half_precision_kwargs(torch.bfloat16, "cuda:0")
    assert kwargs == {"dtype": torch.bfloat16}
    assert slice_st.backends.half_precision_kwargs(torch.float32, "cpu") == {"dtype": torch.float32}


def test_default_threads(monkeypatch):
    """SLICE_ST_THREADS when set, else torch's own setting: never tuned to the machine's size or its load."""
    from slice_st.backends import set_torch_threads

    monkeypatch.setenv("SLICE_ST_THREADS", "3")
    assert default_threads() == 3
    monkeypatch.delenv("SLICE_ST_THREADS")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    for cores, load in ((2, 0.3), (8, 0.3), (8, 2.6), (16, 16.0)):
        monkeypatch.setattr("os.cpu_count", lambda cores=cores: cores)
        monkeypatch.setattr("os.getloadavg", lambda load=load: (load, load, load))
        assert default_threads() == 8
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    assert set_torch_threads(None) == 8 and calls == []  # nothing given: torch keeps its setting
    set_torch_threads(2)
    assert calls == [2]


@pytest.mark.skipif(
    importlib.util.find_spec("optimum") is None,
    reason="sentence-transformers' own OpenVINO backend needs optimum-intel",
)
def test_sentence_transformers_openvino_backend(export_dir, torch_model):
    """A model loaded by sentence-transformers' own ``backend="openvino"`` works with the span API too."""
    pytest.importorskip("optimum.intel")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(
        export_dir, backend="openvino", model_kwargs={"file_name": "openvino/openvino_model.xml"}
    )
    assert backend_of(model) == "openvino"
    assert slice_st.get_span_config(model) == slice_st.config.SpanConfig(**SPAN_SETTINGS)
    for e, g in zip(torch_model.encode_spans(TEXTS), model.encode_spans(TEXTS)):
        assert g.offsets.tolist() == e.offsets.tolist() and g.units.tolist() == e.units.tolist()
        if len(
            e
        ):  # optimum-intel compiles with its own OpenVINO settings: agreed to 1.6e-4 (transformers 5.5.4)
            assert np.abs(g.embeddings - e.embeddings).max() <= 1e-3
    best = model.best_spans(QUERIES, TEXTS)
    assert (
        np.nanmax(
            np.abs(
                np.where(
                    np.isfinite(best.scores),
                    best.scores - torch_model.best_spans(QUERIES, TEXTS).scores,
                    0,
                )
            )
        )
        <= 1e-3
    )


def test_damaged_or_foreign_export_files_are_one_error(export_dir, tmp_path, capsys):
    """Issue 24: a non-ONNX --model-file, a truncated model.onnx, an --export-dir that is a file, --quantized with
    OpenVINO."""
    import shutil

    from slice_st.cli import main

    damaged = tmp_path / "damaged"
    shutil.copytree(export_dir, damaged)
    data = (damaged / "onnx" / "model.onnx").read_bytes()
    (damaged / "onnx" / "model.onnx").write_bytes(data[: len(data) // 3])  # a copy cut short
    (damaged / "onnx" / "config.onnx").write_bytes(
        (damaged / "config.json").read_bytes()
    )  # not ONNX at all
    with pytest.raises(
        slice_st.ModelLoadError,
        match="model.onnx with onnx: not a valid \\(or a truncated\\) onnx model file",
    ):
        slice_st.load_model(str(damaged), backend="onnx")
    with pytest.raises(slice_st.ModelLoadError, match="config.onnx with onnx: not a valid"):
        slice_st.load_model(str(damaged), backend="onnx", model_file="onnx/config.onnx")
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")

    def fails(*argv):
        with pytest.raises(SystemExit) as stop:
            main(["mine", "-q", "dog", str(corpus), "--no-progress", *argv])
        error = capsys.readouterr().err
        assert stop.value.code == 2 and "Traceback" not in error, error
        return error.strip().splitlines()[-1]

    assert "not a valid (or a truncated) onnx model file" in fails(
        "-m", str(damaged), "--backend", "onnx"
    )
    assert "not a valid" in fails(
        "-m", str(damaged), "--backend", "onnx", "--model-file", "onnx/config.onnx"
    )
    assert "is a file, not a folder" in fails(
        "-m", str(damaged), "--backend", "onnx", "--export-dir", str(a_file)
    )
    advice = fails("--backend", "openvino", "--quantized")
    assert (
        "use backend='onnx' (--backend onnx)" in advice
        and "--backend openvino --quantize" not in advice
    )
    assert "has no ONNX export" in fails("--backend", "onnx") and "has no a " not in fails(
        "--backend", "onnx"
    )
    assert not (tmp_path / "a-file").is_dir()
    import os

    modes = {
        name: os.stat(os.path.join(export_dir, name)).st_mode & 0o777
        for name in ("model.safetensors", "config.json")
    }
    assert len(set(modes.values())) == 1, (
        modes
    )  # the export's weights are not 0600 while the rest is 0644
