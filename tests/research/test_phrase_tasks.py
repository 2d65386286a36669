"""PEARL's phrase tasks and Nugget's ParaBank PI : readers, span math, evaluators, CLI.

Fixtures: ``tests/fixtures/phrase_tasks`` (synthetic rows in the real formats); models: the tiny random BERT.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import cosine

from research.document_similarity import (
    ParaphraseIdentificationEvaluator,
    encode_documents,
    maxsim_mean,
    reciprocal_ranks,
)
from research.phrase_data import (
    find_task_data,
    read_bird,
    read_conll_entities,
    read_parabank_pi,
    read_ppdb,
    read_turney,
)
from research.phrase_eval import main
from research.phrase_tasks import (
    BirdEvaluator,
    EntityClusteringEvaluator,
    PairClassificationEvaluator,
    TurneyEvaluator,
    encode_phrases,
    probe_accuracy,
)
from research.span_lab import greedy_disjoint_spans, max_span_cosines, span_cosine_grid, tile_spans
from slice_st.encode import embed_texts, encode_spans
from slice_st.errors import DataFormatError
from slice_st.spans import pool_spans

DATA = Path(__file__).parents[1] / "fixtures" / "phrase_tasks"
PEARL = DATA / "pearl_eval"
PI_DEV = DATA / "nugget_pi" / "paraphrase_identification" / "dev"


# ---------------------------------------------------------------------------------------- readers
def test_readers_parse_the_fixtures():
    bird = read_bird(PEARL / "bird" / "bird.txt")
    assert (bird.phrase1[0], bird.phrase2[0], bird.labels[0]) == (
        "red wine",
        "white wine",
        0.71,
    ) and len(bird) == 6
    turney = read_turney(PEARL / "turney" / "turney.txt")
    assert turney.queries[0] == "piano tuner" and turney.candidates[0] == [
        "technician",
        "pianist",
        "drummer",
        "teapot",
        "glacier",
    ]
    assert read_turney(PEARL / "turney" / "turney.txt", keep_constituents=True).candidates[0][
        :3
    ] == [
        "technician",
        "piano",
        "tuner",
    ]
    ppdb, filtered = (
        read_ppdb(PEARL / "ppdb" / "ppdb.json"),
        read_ppdb(PEARL / "ppdb" / "ppdb_filtered.json"),
    )
    assert (
        len(ppdb) == len(filtered) == 24
        and sum(ppdb.labels) == 12
        and ppdb.labels == filtered.labels
    )
    conll = read_conll_entities(PEARL / "conll2003" / "all_data_small.json")
    assert (
        "MISC" not in conll.labels
        and conll.phrases[:2] == ["Anna Keller", "Lyon"]
        and len(conll) == 11
    )
    tasks = read_parabank_pi(PI_DEV)
    assert (
        tasks.sources == ["L0", "L1", "L2"]
        and tasks.answers == [0, 1, 3]
        and tasks.documents["L2"] == ""
    )


def test_find_task_data_accepts_parent_or_own_folder(tmp_path):
    assert find_task_data("bird", [DATA]) == str(PEARL / "bird" / "bird.txt")
    assert find_task_data("bird", [PEARL]) == str(PEARL / "bird" / "bird.txt")
    assert find_task_data("parabank-pi", [DATA]) == str(PI_DEV)
    assert find_task_data("conll03", [DATA]).endswith("all_data_small.json")  # no test.json here
    with pytest.raises(FileNotFoundError, match="no data for task 'ppdb' under"):
        find_task_data("ppdb", [tmp_path])
    with pytest.raises(ValueError, match="unknown task"):
        find_task_data("yago", [DATA])


@pytest.mark.parametrize(
    ("reader", "name", "content", "message"),
    [
        (read_bird, "bird.txt", "term1\tterm2\tscore\na\tb\t0.1\n", "lacks one of the columns"),
        (
            read_bird,
            "bird.txt",
            "pair\tterm1\tterm2\trelatedness score\nx\ta\tb\t0.5\nx\ta\tb\thigh\n",
            r"line 3: relatedness score 'high'",
        ),
        (
            read_bird,
            "bird.txt",
            "pair\tterm1\tterm2\trelatedness score\nx\ta\tb\n",
            r"line 2: expected 4 tab-separated fields, got 3",
        ),
        (
            read_bird,
            "bird.txt",
            "pair\tterm1\tterm2\trelatedness score\nx\t \tb\t0.2\n",
            r"line 2: term1 is empty",
        ),
        (
            read_turney,
            "turney.txt",
            "a b | c | a | b | d\nx y | z | x\n",
            r"line 2: expected 'bigram \| answer",
        ),
        (
            read_ppdb,
            "ppdb.json",
            '[\n ["a", "b", "pos"],\n ["a", "c", "maybe"]\n]',
            r"line 3: label 'maybe'",
        ),
        (
            read_ppdb,
            "ppdb.json",
            '[\n ["a", "b", "pos"],\n ["a", "c" "neg"]\n]',
            r"line 3: invalid JSON",
        ),
        (read_ppdb, "ppdb.json", '{"a": 1}', r"line 1: expected a JSON array"),
        (
            read_ppdb,
            "ppdb.json",
            '[["a", "b", "pos"], ["c", "d", "pos"]]',
            "need both 'pos' and 'neg'",
        ),
        (
            read_conll_entities,
            "c.json",
            '{"sentences": [["A", "B"]], "ner": [[[0, 5, "PER"]]]}\n',
            r"line 1: entity \[0, 5\] is outside",
        ),
        (
            read_conll_entities,
            "c.json",
            '{"sentences": [["A"]], "ner": [[[0, 0, "PER"]]]}\n{"oops"\n',
            r"line 2: invalid JSON",
        ),
    ],
)
def test_readers_name_file_and_line(tmp_path, reader, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataFormatError, match=message) as error:
        reader(path)
    assert str(path) in str(error.value)


def test_parabank_reader_errors(tmp_path):
    (tmp_path / "docs.txt").write_text("L0\tsome text\nR0\tother text\nR0\tdup\n")
    (tmp_path / "task.jsonl").write_text(
        '{"source": "L0", "candidates": ["R0", "R1"], "answer": 0}\n'
    )
    with pytest.raises(DataFormatError, match=r"docs.txt, line 3: duplicate document id 'R0'"):
        read_parabank_pi(tmp_path)
    (tmp_path / "docs.txt").write_text("L0\tsome text\nR0\tother text\n")
    with pytest.raises(DataFormatError, match=r"task.jsonl, line 1: document id 'R1' is not in"):
        read_parabank_pi(tmp_path)
    (tmp_path / "task.jsonl").write_text(
        '{"source": "L0", "candidates": ["R0", "L0"], "answer": 2}\n'
    )
    with pytest.raises(DataFormatError, match=r"line 1: answer 2 is not a position"):
        read_parabank_pi(tmp_path)
    with pytest.raises(FileNotFoundError, match="paraphrase identification folder not found"):
        read_parabank_pi(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="data file not found"):
        read_bird(tmp_path / "missing.txt")


# -------------------------------------------------------------------------------------- span math
def _random_rows(seed: int, rows: int = 3, tokens: int = 9, dim: int = 5):
    generator = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(rows, tokens, dim, generator=generator)
    units = [7, 4, 0][:rows]
    boundaries = torch.zeros(rows, 8, dtype=torch.long)
    for row, count in enumerate(
        units
    ):  # unit u = tokens [1 + u, 2 + u) except the last, two tokens wide
        starts = list(range(1, count + 1)) + [count + 2 if count else 1]
        starts = starts + [starts[-1]] * (8 - len(starts))
        boundaries[row] = torch.tensor(starts)
    return embeddings, boundaries, torch.tensor(units)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_max_span_cosines_matches_materialised_spans(seed):
    embeddings, boundaries, num_units = _random_rows(seed)
    queries = torch.randn(6, 5, generator=torch.Generator().manual_seed(seed + 10))
    best = max_span_cosines(queries, embeddings, boundaries, num_units, 1, 3, query_chunk=4)
    pooled = pool_spans(embeddings, boundaries, num_units, 1, 3)
    for row in range(3):
        spans = pooled.embeddings[row][pooled.mask[row]]
        if len(spans) == 0:
            assert torch.isinf(best[row]).all()
            continue
        naive = torch.nn.functional.cosine_similarity(
            queries[:, None, :], spans[None, :, :], dim=-1
        ).amax(dim=1)
        assert torch.allclose(best[row], naive, atol=1e-5)


def test_span_cosine_grid_and_selection():
    embeddings, boundaries, num_units = _random_rows(3)
    centre = torch.randn(3, 5)
    grid = span_cosine_grid(centre, embeddings, boundaries, num_units, 1, 3)
    pooled = pool_spans(embeddings, boundaries, num_units, 1, 3)
    row = 0
    for (start, end), vector in zip(
        zip(pooled.starts.tolist(), pooled.ends.tolist()), pooled.embeddings[row]
    ):
        if end <= int(num_units[row]):
            assert math.isclose(
                float(grid[row, start, end - start - 1]), cosine(vector, centre[row]), abs_tol=1e-5
            )
    assert torch.isnan(grid[2]).all() and torch.isnan(grid[1, 4, 0]) and torch.isnan(grid[0, 6, 1])

    starts, ends = greedy_disjoint_spans(grid, torch.tensor([3, 10, 2]))
    assert starts.shape == (3, 10)
    flat = torch.nan_to_num(grid[0], nan=-math.inf).flatten()
    first = int(flat.argmax())
    assert (int(starts[0, 0]), int(ends[0, 0])) == (first // 3, first // 3 + first % 3 + 1)
    for r in range(3):
        chosen = [(s, e) for s, e in zip(starts[r].tolist(), ends[r].tolist()) if s >= 0]
        covered = [u for s, e in chosen for u in range(s, e)]
        assert len(covered) == len(set(covered)) and all(e <= int(num_units[r]) for _, e in chosen)
    assert len([s for s in starts[1].tolist() if s >= 0]) <= 4 and (starts[2] == -1).all()

    tiles_start, tiles_end = tile_spans(torch.tensor([7, 4, 0]), torch.tensor([3, 6, 2]))
    assert tiles_start[0, :3].tolist() == [0, 2, 4] and tiles_end[0, :3].tolist() == [2, 4, 7]
    assert tiles_end[1, :4].tolist() == [1, 2, 3, 4] and (tiles_start[2] == -1).all()


# ------------------------------------------------------------------------------------- evaluators
def test_phrase_encodings(tiny_model):
    span = encode_phrases(tiny_model, ["red wine", "claret", "red wine"], "span")
    assert np.allclose(span[0], span[2]) and np.allclose(
        span[0], embed_texts(tiny_model, ["red wine"])[0].numpy(), atol=1e-6
    )
    sentence = encode_phrases(tiny_model, ["red wine"], "sentence")
    assert np.allclose(sentence[0], tiny_model.encode(["red wine"])[0], atol=1e-6)
    with pytest.raises(ValueError, match="encoding must be one of"):
        encode_phrases(tiny_model, ["x"], "cls")


def test_bird_and_turney_match_naive(tiny_model):
    bird = BirdEvaluator.from_file(str(PEARL / "bird" / "bird.txt"), name="bird")
    metrics = bird(tiny_model)
    assert bird.primary_metric == "bird_span_pearson" and set(metrics) == {
        "bird_span_pearson",
        "bird_span_spearman",
        "bird_sentence_pearson",
        "bird_sentence_spearman",
    }
    data = read_bird(PEARL / "bird" / "bird.txt")
    left, right = (
        embed_texts(tiny_model, data.phrase1).numpy(),
        embed_texts(tiny_model, data.phrase2).numpy(),
    )
    naive = np.corrcoef([cosine(a, b) for a, b in zip(left, right)], data.labels)[0, 1]
    assert math.isclose(metrics["bird_span_pearson"], naive, abs_tol=1e-5)

    turney = TurneyEvaluator.from_file(
        str(PEARL / "turney" / "turney.txt"), encodings=("sentence",)
    )
    items = read_turney(PEARL / "turney" / "turney.txt")
    correct = 0
    for query, options in zip(items.queries, items.candidates):
        vectors = tiny_model.encode([query, *options])
        correct += int(np.argmax([cosine(vectors[0], v) for v in vectors[1:]]) == 0)
    assert turney(tiny_model) == {"sentence_accuracy": correct / len(items)}


def test_ppdb_probe_is_seeded_and_conll_clusters(tiny_model, tmp_path):
    evaluator = PairClassificationEvaluator.from_file(
        str(PEARL / "ppdb" / "ppdb.json"), encodings=("span",), seeds=(0, 1)
    )
    first, second = evaluator(tiny_model, output_path=str(tmp_path)), evaluator(tiny_model)
    assert first == second and 0 <= first["span_accuracy"] <= 1 and first["span_accuracy_std"] >= 0
    assert (
        (tmp_path / "ppdb_evaluation_results.csv")
        .read_text()
        .startswith("epoch,steps,span_accuracy,span_accuracy_std")
    )
    rng = np.random.default_rng(0)
    features = rng.normal(size=(300, 6))
    labels = (features[:, 0] + features[:, 3] > 0).astype(int)
    assert (
        probe_accuracy(features, labels, 0, learning_rate=1e-2)
        == probe_accuracy(features, labels, 0, learning_rate=1e-2)
        > 0.85
    )
    with pytest.raises(ValueError, match="both classes"):
        PairClassificationEvaluator(["a", "b"], ["c", "d"], [1, 1])

    conll = EntityClusteringEvaluator.from_file(str(PEARL / "conll2003" / "all_data_small.json"))
    metrics = conll(tiny_model)
    assert conll.num_clusters == 3 and all(0 <= v <= 1 for v in metrics.values())


def test_evaluator_input_errors():
    with pytest.raises(ValueError, match="encodings must be distinct values"):
        BirdEvaluator(["a", "b", "c"], ["d", "e", "f"], [0, 1, 2], encodings=("span", "span"))
    with pytest.raises(ValueError, match=r"phrase2\[1\] is empty"):
        BirdEvaluator(["a", "b", "c"], ["d", "", "f"], [0, 1, 2])
    with pytest.raises(ValueError, match="at least one distractor"):
        TurneyEvaluator(["a b"], [["c"]])
    with pytest.raises(ValueError, match="at least 2 entity types"):
        EntityClusteringEvaluator(["a", "b", "c"], ["PER"] * 3)


# ----------------------------------------------------------------------------- document similarity
def test_encode_documents_tokens_and_words(tiny_model_short):
    texts = [
        "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
        "eighteen nineteen twenty twenty-one twenty-two",
        "Short text, here.",
        "",
    ]
    store = encode_documents(
        tiny_model_short, texts
    )  # 22-token windows: the first text is windowed
    tokens = encode_spans(tiny_model_short, texts, min_span=1, max_span=1, unit="token")
    assert store.num_tokens().tolist() == [len(t) for t in tokens]
    assert torch.allclose(store.tokens(0), torch.as_tensor(tokens[0].embeddings))
    embeddings, boundaries, num_units = store.batch([0, 1, 2])
    assert num_units.tolist() == [len(texts[0].split()), 3, 0]
    words = encode_spans(tiny_model_short, texts[1], min_span=1, max_span=1, unit="word")
    means = [
        embeddings[1, s:e].mean(dim=0)
        for s, e in zip(boundaries[1, :3].tolist(), boundaries[1, 1:4].tolist())
    ]
    assert torch.allclose(torch.stack(means), torch.as_tensor(words.embeddings), atol=1e-5)


def test_maxsim_and_reciprocal_ranks():
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    documents = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [1.0, 1.0]]])
    mask = torch.tensor([[True, False], [True, True]])
    assert torch.allclose(
        maxsim_mean(queries, documents, mask), torch.tensor([0.5, (2**-0.5 + 1) / 2])
    )
    assert maxsim_mean(queries[:0], documents).tolist() == [0.0, 0.0]
    ranks = reciprocal_ranks(np.array([[0.1, 0.5, 0.5, 0.2], [0.0, 0.0, 0.0, 0.0]]), [1, 3])
    assert np.allclose(ranks, [(1 + 1 / 2) / 2, np.mean(1 / np.arange(1, 5))])


def test_paraphrase_evaluator_spans_equal_naive_maxsim(tiny_model, tmp_path):
    tasks = read_parabank_pi(PI_DEV)
    evaluator = ParaphraseIdentificationEvaluator.from_tasks(
        tasks, max_span=3, ratios=(0.25, 1.0), cache_dir=str(tmp_path / "cache"), cache_key="tiny"
    )
    metrics = evaluator(tiny_model, output_path=str(tmp_path))
    assert (
        evaluator.primary_metric == "spans_mrr"
        and (tmp_path / "paraphrase_identification_evaluation_results.csv").is_file()
    )
    expected = {
        "document",
        "mean",
        "tokens",
        "spans",
        "tile@0.25",
        "tile@1",
        "central@0.25",
        "central@1",
    }
    assert {key.rsplit("_", 1)[0] for key in metrics} == expected
    assert all(0 < metrics[f"{m}_mrr"] <= 1 for m in expected)
    assert (
        metrics["document_vectors"] == 1.0
        and metrics["tile@0.25_vectors"] < metrics["tile@1_vectors"] <= metrics["tokens_vectors"]
    )
    # the empty source (task 3) ties all candidates for the multi-vector methods: expected RR of a 4-way tie
    scores = evaluator.scores(tiny_model)
    assert (
        np.allclose(scores["spans"][0][2], 0.0)
        and len(list((tmp_path / "cache").glob("doc-tokens-*.npz"))) == 1
    )

    # spans: naive MaxSim-mean of the source's materialised spans against each candidate's
    spans = {
        d: encode_spans(tiny_model, tasks.documents[d], max_span=3).embeddings
        for d in ("L0", "R0", "R2", "R3", "R4")
    }
    naive = []
    for candidate in tasks.candidates[0]:
        sims = np.array([[cosine(q, s) for s in spans[candidate]] for q in spans["L0"]])
        naive.append(sims.max(axis=1).mean())
    assert np.allclose(scores["spans"][0][0], naive, atol=1e-5)


def test_paraphrase_evaluator_errors():
    docs = {"a": "x y", "b": "y z"}
    with pytest.raises(ValueError, match="document 'c' is not among"):
        ParaphraseIdentificationEvaluator(docs, ["a"], [["b", "c"]], [0])
    with pytest.raises(ValueError, match="ratios must lie in"):
        ParaphraseIdentificationEvaluator(docs, ["a"], [["b", "a"]], [0], ratios=(0,))
    with pytest.raises(ValueError, match="unknown selection rule"):
        ParaphraseIdentificationEvaluator(docs, ["a"], [["b", "a"]], [0], rules=("random",))
    with pytest.raises(ValueError, match="unknown method"):
        ParaphraseIdentificationEvaluator(docs, ["a"], [["b", "a"]], [0], methods=("bm25",))


# -------------------------------------------------------------------------------------------- CLI
def test_cli_table_and_json(tiny_model_dir, capsys):
    argv = ["-t", "all", "-d", str(DATA), "-m", tiny_model_dir, "--seeds", "0", "--max-span", "3"]
    assert main(argv) == 0
    table = capsys.readouterr().out
    for task in ("bird", "turney", "ppdb", "ppdb-filtered", "conll03", "parabank-pi"):
        assert f"\n{task} " in table
    assert "tile@0.05" in table and "central@0.25" in table

    assert (
        main(
            [
                "-t",
                "bird",
                "-t",
                "parabank-pi",
                "-d",
                str(PEARL),
                "-d",
                str(DATA / "nugget_pi"),
                "-m",
                tiny_model_dir,
                "-f",
                "json",
                "--encoding",
                "span",
                "--methods",
                "mean,spans",
                "--limit",
                "3",
            ]
        )
        == 0
    )
    results = json.loads(
        capsys.readouterr().out,
        parse_constant=lambda name: pytest.fail(f"non-strict JSON constant {name}"),
    )
    assert [r["task"] for r in results] == ["bird", "parabank-pi"]
    assert set(results[0]["results"]) == {"span"} and set(results[0]["results"]["span"]) == {
        "pearson",
        "spearman",
    }
    assert results[0]["metric"] == "pearson" and results[0]["n"] == 3 and results[1]["n"] == 3
    assert set(results[1]["results"]) == {"mean", "spans"} and set(
        results[1]["results"]["spans"]
    ) == {"mrr", "vectors"}


def test_cli_json_writes_null_for_nan(tiny_model_dir, capsys, monkeypatch):
    import research.phrase_eval as cli_module

    class Constant:
        def __call__(self, model):
            return {"span_pearson": float("nan"), "span_spearman": 0.5}

    monkeypatch.setattr(
        cli_module, "_evaluator", lambda task, path, args, cache_key=None: (Constant(), 6)
    )
    assert main(["-t", "bird", "-d", str(DATA), "-m", tiny_model_dir, "-f", "json"]) == 0
    out = capsys.readouterr().out
    assert "NaN" not in out and json.loads(out)[0]["results"]["span"] == {
        "pearson": None,
        "spearman": 0.5,
    }


def test_cli_bad_input(tiny_model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["-t", "bird", "-d", str(tmp_path / "nowhere"), "-m", tiny_model_dir])
    assert exit_info.value.code == 2 and "error: --data folder not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["-t", "ppdb", "-d", str(tmp_path), "-m", tiny_model_dir])
    assert exit_info.value.code == 2 and "no data for task 'ppdb'" in capsys.readouterr().err
    (tmp_path / "bird").mkdir()
    (tmp_path / "bird" / "bird.txt").write_text(
        "pair\tterm1\tterm2\trelatedness score\nx\ta\tb\t0.5\nx\ta\tb\tn/a\n"
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["-t", "bird", "-d", str(tmp_path), "-m", tiny_model_dir])
    err = capsys.readouterr().err
    assert (
        exit_info.value.code == 2
        and err.startswith("python -m research.phrase_eval: error: ")
        and "bird.txt, line 3" in err
        and "Traceback" not in err
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["-t", "yago", "-d", str(DATA)])
    assert exit_info.value.code == 2 and "invalid choice: 'yago'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["-t", "parabank-pi", "-d", str(DATA), "-m", tiny_model_dir, "--rules", "random"])
    assert (
        exit_info.value.code == 2 and "unknown selection rule 'random'" in capsys.readouterr().err
    )


@pytest.mark.parametrize("damage", ["empty", "truncated", "pickle"])
def test_a_damaged_cache_is_rebuilt_never_unpickled(tiny_model, tmp_path, caplog, damage):
    """A corrupt or 0-byte --cache file was an UnpicklingError/EOFError traceback; the cache is .npz, not a
    pickle."""
    import logging
    import pickle

    tasks = read_parabank_pi(PI_DEV)

    def evaluator():
        return ParaphraseIdentificationEvaluator.from_tasks(
            tasks, max_span=3, ratios=(1.0,), cache_dir=str(tmp_path / "cache"), cache_key="tiny"
        )

    first = evaluator().scores(tiny_model)
    files = sorted((tmp_path / "cache").glob("*.npz"))
    assert files and not list((tmp_path / "cache").glob("*.pt"))
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    for path in files:
        data = path.read_bytes()
        path.write_bytes(
            {"empty": b"", "truncated": data[: len(data) // 2], "pickle": pickle.dumps(Payload())}[
                damage
            ]
        )
    with caplog.at_level(logging.WARNING):
        again = evaluator().scores(tiny_model)
    assert (
        "not a readable cache archive" in caplog.text
        and "rebuilding it" in caplog.text
        and not marker.exists()
    )
    assert all(np.allclose(first[method][0], again[method][0]) for method in first)
    assert all(path.stat().st_size > 100 for path in files)  # rewritten whole
