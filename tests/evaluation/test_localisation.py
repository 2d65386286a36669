"""Where the best span lands (slice_st.evaluation.localisation) in the evaluator and the MTEB task."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from slice_st.data import read_stsb_context
from slice_st.evaluation import SpanRetrievalEvaluator
from slice_st.evaluation.localisation import locate_paraphrase, span_localisation, span_words

FIXTURE = Path(__file__).parents[1] / "fixtures" / "stsb_context_sample.tsv"
PASSAGE = 'He said: "A man is slicing a bun," and left the kitchen.'
PARAPHRASE = "A man is slicing a bun."


def test_locate_ignores_case_and_punctuation():
    assert locate_paraphrase(PASSAGE, PARAPHRASE) == (2, 8)
    assert locate_paraphrase(PASSAGE, "a woman") is None
    assert locate_paraphrase(PASSAGE, "...") is None  # no word at all
    assert [w for _, _, w in span_words('"A man,"')] == ["a", "man"]


def test_exact_f1_and_strong_rows():
    start = PASSAGE.index('"A')
    whole = (start, PASSAGE.index(",", start) + 1)  # '"A man is slicing a bun,'
    clipped = (PASSAGE.index("man"), PASSAGE.index("bun") + 3)  # one word short
    crossing = (PASSAGE.index("bun"), PASSAGE.index("left") + 4)
    result = span_localisation(
        [PASSAGE] * 4, [whole, clipped, crossing, None], [PARAPHRASE] * 4, [4.0, 3.0, 1.0, 5.0]
    )
    assert result["located"] == 4 and result["strong_located"] == 3
    assert result["exact"] == 25.0 and result["strong_exact"] == pytest.approx(100 / 3)
    f1_clipped = 2 * 5 / (5 + 6)
    f1_crossing = 2 * 1 / (3 + 6)  # «bun," and left»: 3 words, one shared
    assert result["word_f1"] == pytest.approx(100 * (1 + f1_clipped + f1_crossing + 0) / 4)
    assert result["shorter"] == pytest.approx(
        75.0
    )  # clipped, crossing (3 words < 6) and the missing span
    empty = span_localisation([PASSAGE], [whole], ["not here"], [4.0])
    assert empty["located"] == 0 and math.isnan(empty["exact"])
    with pytest.raises(ValueError, match="same length"):
        span_localisation([PASSAGE], [], [PARAPHRASE], [4.0])


def test_evaluator_reports_localisation_next_to_spearman(tiny_model):
    rows = read_stsb_context(FIXTURE)
    evaluator = SpanRetrievalEvaluator.from_dataset(rows, setups=("full", "single"), max_span=6)
    metrics = evaluator(tiny_model)
    for name in ("single_exact", "single_word_f1", "single_strong_exact", "single_strong_word_f1"):
        assert 0 <= metrics[name] <= 100
    assert "full_exact" not in metrics  # one vector per passage: no span
    assert (
        evaluator.get_config_dict()["scorer"] == "reranked"
        and "single_strong_exact" in evaluator.csv_headers
    )
    single = evaluator.last_results["single"]
    expected = span_localisation(
        list(rows["passage"]), single.spans, list(rows["paraphrase"]), list(rows["goldsim"])
    )
    assert (
        metrics["single_exact"] == expected["exact"]
        and metrics["single_strong_word_f1"] == expected["strong_word_f1"]
    )
    paper = SpanRetrievalEvaluator.from_dataset(
        rows, setups=("single",), max_span=6, scorer="max-cosine"
    )(tiny_model)
    assert (
        paper["single_spearman"] != metrics["single_spearman"]
        or paper["single_exact"] != metrics["single_exact"]
    )
    plain = SpanRetrievalEvaluator(
        list(rows["line"]),
        list(rows["passage"]),
        list(rows["goldsim"]),
        setups=("single",),
        max_span=6,
    )
    assert "single_exact" not in plain(tiny_model)  # no paraphrases given: no localisation
    with pytest.raises(ValueError, match="paraphrases"):
        SpanRetrievalEvaluator(
            list(rows["line"]), list(rows["passage"]), list(rows["goldsim"]), paraphrases=["a"]
        )
    with pytest.raises(ValueError, match="scorer"):
        SpanRetrievalEvaluator.from_dataset(rows, scorer="longest")


def test_mteb_task_extra_scores_include_localisation(tiny_model, tmp_path):
    mteb = pytest.importorskip("mteb")
    from slice_st.integrations.mteb import STSBContext, mteb_model

    result = mteb.evaluate(
        mteb_model(tiny_model),
        [STSBContext(FIXTURE, max_span=6)],
        cache=mteb.ResultCache(str(tmp_path)),
        show_progress_bar=False,
        co2_tracker=False,
    )
    scores = next(iter(result.task_results[0].scores.values()))[0]
    for name in (
        "exact",
        "word_f1",
        "strong_exact",
        "strong_word_f1",
        "max_cosine_spearman",
        "max_cosine_exact",
    ):
        assert name in scores
