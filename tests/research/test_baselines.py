"""Baselines (BM25, GloVe, DensePhrases-style, any ST model) and the Table-1 writer (research.baselines,
research.table)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import slice_st
from research.baselines import (
    BM25System,
    DensePhrasesSystem,
    GloveSystem,
    SentenceTransformerSystem,
    glove_tokenize,
    make_system,
    ngram_offsets,
    score_ngram,
)
from research.table import (
    bar_chart,
    localisation_table,
    main,
    markdown_table,
    run_table,
    table_metrics,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"
DATA_SAMPLE = str(FIXTURES / "stsb_context_sample.tsv")
PHRASES = [
    "a man plays guitar",
    "a dog runs",
    "the stock market fell",
    "a woman cooks",
    "kids play football",
]
PASSAGES = [
    "Late again. A man is playing a guitar on stage. The crowd cheered.",
    "It rained all day. A cat sleeps on the sofa. Nobody came.",
    "Prices rose. Shares dropped sharply on Monday. Traders left early.",
    "The bus was late. A lady is preparing food. It smelled good.",
    "Snow fell. Children are playing soccer in the park. The café closed.",
]
GOLD = [4.8, 1.0, 3.9, 4.2, 4.0]


def test_bm25_full_and_ngram(tokenizer):
    system = BM25System(tokenizer=tokenizer)
    full = system.score("full", PHRASES, PASSAGES)  # IDF from these 5 passages
    assert full.scores[0] > 0 and full.scores[1] == 0  # "man ... guitar" shared; "dog runs" not
    ngram = system.score(
        "ngram",
        ["guitar stage"],
        ["Rain today. A guitar on the stage. Later, nothing."],
        max_span=4,
    )
    text = "Rain today. A guitar on the stage. Later, nothing."
    span = text[slice(*ngram.spans[0])]
    assert "guitar" in span and "stage" in span
    with pytest.raises(ValueError, match="no 'single' setup"):
        system.score("single", PHRASES, PASSAGES)


def test_glove_ngram_uses_core_units(tokenizer):
    system = GloveSystem(tokenizer=tokenizer)
    result = system.score(
        "ngram", ["a guitar"], ["It rained. A man plays the guitar. Then it stopped."], max_span=3
    )
    offsets = ngram_offsets(
        tokenizer, ["It rained. A man plays the guitar. Then it stopped."], 1, 3
    )[0].tolist()
    assert list(result.spans[0]) in offsets  # a span the core would produce too
    full = system.score("full", PHRASES, PASSAGES)
    assert np.isfinite(full.scores).all()
    assert [t for t, _, _ in glove_tokenize("Don't stop.")] == ["do", "n't", "stop", "."]


def test_densephrases_and_st_system(tiny_model):
    dense = DensePhrasesSystem(tiny_model, name="dp").score("single", PHRASES, PASSAGES, max_span=5)
    assert all(span is not None for span in dense.spans)
    assert ((dense.scores >= -1) & (dense.scores <= 1)).all()
    st = SentenceTransformerSystem(tiny_model, name="tiny")
    for setup in ("full", "ngram", "single"):
        assert st.score(setup, PHRASES[:2], PASSAGES[:2], max_span=3).scores.shape == (2,)


def test_make_system_specs():
    assert isinstance(make_system("bm25"), BM25System)
    assert isinstance(make_system("glove"), GloveSystem)
    assert make_system("st:some/model").name == "model"
    assert (
        make_system("default").name == "slice-minilm"
        and make_system("st:base").name == "all-MiniLM-L6-v2"
    )
    assert make_system("densephrases:org/m").name == "DensePhrases-style (m)"


def test_table_markdown_png_and_cache(tiny_model, tokenizer, tmp_path):
    systems = [
        SentenceTransformerSystem(tiny_model, name="tiny"),
        BM25System(tokenizer=tokenizer),
        DensePhrasesSystem(tiny_model, name="dp"),
    ]
    phrases, passages, gold = PHRASES * 2, PASSAGES[1:] + PASSAGES[:1] + PASSAGES, GOLD * 2
    table = run_table(
        systems,
        phrases,
        passages,
        gold,
        max_span=3,
        cache_dir=str(tmp_path / "cache"),
        ngram_limit=6,
    )
    assert len(table["ngram"]["indices"]) == 6 and len(table["full"]["indices"]) == 10
    assert set(table["single"]["results"]) == {"tiny", "dp"}
    metrics = table_metrics(table)
    text = markdown_table(metrics)
    lines = text.splitlines()
    assert lines[0].startswith("| System | Full context Pearson")
    assert any(line.startswith("| BM25 |") and "| — | — |" in line for line in lines)
    assert "**" in text and "Williams" in text and "n = 6 pairs" in text
    png = bar_chart(metrics, str(tmp_path / "t.png"))
    assert Path(png).read_bytes()[:4] == b"\x89PNG"
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(cached) == 6  # tiny x 3 setups, BM25 x 2, dp x 1
    again = run_table(
        systems,
        phrases,
        passages,
        gold,
        max_span=3,
        cache_dir=str(tmp_path / "cache"),
        ngram_limit=6,
    )
    assert (
        again["ngram"]["results"]["tiny"].scores.tolist()
        == table["ngram"]["results"]["tiny"].scores.tolist()
    )


def test_table_cli(tmp_path, capsys, tiny_model_dir):
    out = tmp_path / "out"
    code = main(
        [
            str(FIXTURES / "stsb_context_sample.tsv"),
            "--system",
            "bm25",
            "--system",
            f"st:{tiny_model_dir}",
            "--setups",
            "full,single",
            "--max-span",
            "4",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert {"table.md", "table.png", "metrics.json", "predictions.csv"} <= {
        p.name for p in out.iterdir()
    }
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["pairs"] == 8 and set(metrics["metrics"]) == {"full", "single"}
    assert "| BM25 |" in capsys.readouterr().out


def _two_runs_named_final(tmp_path, tiny_model_dir):
    """runA/final and runB/final: the same architecture and folder name, different weights."""
    import torch

    import slice_st

    folders = []
    for run, seed in (("runA", 1), ("runB", 2)):
        model = slice_st.load_model(tiny_model_dir)
        torch.manual_seed(seed)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        folder = tmp_path / run / "final"
        model.save(str(folder))
        folders.append(str(folder))
    return folders


def test_table_keys_systems_by_fingerprint_not_folder_name(tmp_path, tiny_model_dir, capsys):
    """Two runs' `final` models in one table, each with its own cache entry; a later table of run B alone
    reads B's results, never A's (the cache used to be keyed by the display name `final`)."""
    run_a, run_b = _two_runs_named_final(tmp_path, tiny_model_dir)
    cache = tmp_path / "cache"
    common = [
        DATA_SAMPLE,
        "--setups",
        "single",
        "--max-span",
        "4",
        "--cache",
        str(cache),
        "--quiet",
    ]
    assert (
        main([*common, "-s", f"st:{run_a}", "-s", f"st:{run_b}", "--out", str(tmp_path / "both")])
        == 0
    )
    both = json.loads((tmp_path / "both" / "metrics.json").read_text())
    assert set(both["metrics"]["single"]) == {"runA/final", "runB/final"}
    assert both["systems"]["runA/final"]["key"] != both["systems"]["runB/final"]["key"]
    assert len(list(cache.iterdir())) == 2
    assert main([*common, "-s", f"st:{run_b}", "--out", str(tmp_path / "b")]) == 0
    alone = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert (
        alone["metrics"]["single"]["runB/final"]["spearman"]
        == both["metrics"]["single"]["runB/final"]["spearman"]
    )
    assert len(list(cache.iterdir())) == 2  # reused B's entry


def test_same_display_name_is_told_apart_by_fingerprint(tmp_path, tiny_model_dir):
    from research.table import system_labels

    run_a, run_b = _two_runs_named_final(tmp_path, tiny_model_dir)
    systems = [
        SentenceTransformerSystem(run_a, name="final"),
        SentenceTransformerSystem(run_b, name="final"),
    ]
    labels = system_labels(systems)
    assert labels[0] != labels[1] and all(label.startswith("final [st-") for label in labels)
    with pytest.raises(ValueError, match="the same system is given twice"):
        system_labels(
            [SentenceTransformerSystem(run_a), SentenceTransformerSystem(run_a, name="again")]
        )


def test_evaluation_caches_never_write_through_a_planted_temp_link(tmp_path):
    """The Table-1 result cache used a fixed ``PATH.tmp``: a link planted there was written through."""
    from research.table import load_result, save_result
    from slice_st.evaluation.span_retrieval import SetupResult

    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    path = tmp_path / "cache" / "result.json"
    path.parent.mkdir()
    (tmp_path / "cache" / "result.json.tmp").symlink_to(outside)
    save_result(str(path), SetupResult(scores=np.array([0.5, 0.25]), seconds=1.0))
    assert outside.read_text() == "precious" and not path.is_symlink()
    assert list(load_result(str(path)).scores) == [0.5, 0.25]


def test_table_reports_localisation_per_scorer(tiny_model, tmp_path):
    from slice_st.data import read_stsb_context

    rows = read_stsb_context(DATA_SAMPLE)
    phrases, passages, gold = list(rows["line"]), list(rows["passage"]), list(rows["goldsim"])
    systems = [
        SentenceTransformerSystem(tiny_model, name="tiny"),
        SentenceTransformerSystem(tiny_model, name="tiny-paper", scorer="max-cosine"),
    ]
    table = run_table(
        systems, phrases, passages, gold, setups=("single",), max_span=6, cache_dir=str(tmp_path)
    )
    metrics = table_metrics(table, passages, list(rows["paraphrase"]))
    for name in ("tiny", "tiny-paper"):
        assert {"exact", "word_f1", "strong_exact", "strong_word_f1", "located"} <= set(
            metrics["single"][name]
        )
    text = localisation_table(metrics)
    assert "| tiny | Single forward |" in text and "| tiny-paper | Single forward |" in text
    assert (
        systems[0].cache_key != systems[1].cache_key
    )  # a cached single pass is never reused under another scorer
    assert make_system("default@max-cosine").scorer.name == "max-cosine"
    assert make_system("default").scorer.name == "reranked"
    assert "[max-cosine]" in make_system("default@max-cosine").name


NGRAM_PASSAGES = [
    "Late again. A man is playing a guitar on stage. The crowd cheered.",
    "It rained all day. A cat sleeps on the sofa, don't wake it. Nobody came.",
]


def test_ngram_offsets_match_the_span_core(tiny_model):
    for unit in ("word", "token"):
        offsets = ngram_offsets(tiny_model.tokenizer, NGRAM_PASSAGES, 1, 4, unit)
        for text, rows in zip(NGRAM_PASSAGES, offsets):
            expected = slice_st.encode_spans(tiny_model, text, max_span=4, unit=unit).offsets
            assert rows.tolist() == expected.tolist()


def test_ngram_setup_encodes_every_ngram_on_its_own(tiny_model, monkeypatch):
    seen: list[str] = []
    original = type(tiny_model).encode

    def counting_encode(self, inputs, *args, **kwargs):
        seen.extend(inputs if isinstance(inputs, list) else [inputs])
        return original(self, inputs, *args, **kwargs)

    monkeypatch.setattr(type(tiny_model), "encode", counting_encode)
    result = score_ngram(tiny_model, PHRASES[:2], NGRAM_PASSAGES, max_span=3, batch_size=16)
    monkeypatch.undo()
    ngrams = [
        text[s:e]
        for text, rows in zip(
            NGRAM_PASSAGES, ngram_offsets(tiny_model.tokenizer, NGRAM_PASSAGES, 1, 3)
        )
        for s, e in rows
    ]
    assert set(ngrams) <= set(seen)  # every n-gram was an input of its own
    for i in range(2):  # the score is the cosine of the best n-gram's own embedding
        start, end = result.spans[i]
        vectors = tiny_model.encode(
            [PHRASES[i], NGRAM_PASSAGES[i][start:end]] + ngrams, convert_to_numpy=True
        )
        cos = (
            vectors[2:]
            @ vectors[0]
            / (np.linalg.norm(vectors[2:], axis=1) * np.linalg.norm(vectors[0]))
        )
        own = [k for k, text in enumerate(ngrams) if text in NGRAM_PASSAGES[i]]
        assert result.scores[i] == pytest.approx(cos[own].max(), abs=1e-5)
        assert result.scores[i] == pytest.approx(
            float(cos[ngrams.index(NGRAM_PASSAGES[i][start:end])]), abs=1e-5
        )
