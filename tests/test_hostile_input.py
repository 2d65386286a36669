"""Hostile input to the library and the CLI (issue 17 B3, B6–B11, B14–B22, B24, B25): a clear error or a documented
result.

A CLI error is one line ``slice-st: error: …`` with exit 2, never a traceback.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import slice_st
from slice_st import SpanIndex, SpanInputError
from slice_st.cli import main
from slice_st.data.corpus import CorpusError, read_corpus, read_jsonl
from slice_st.text import read_texts


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr()


def _fails(capsys, *argv) -> str:
    """Run the CLI expecting exit 2 and one error line ``slice-st: error: …`` (no traceback); returns that line.

    (Loading a model may draw progress bars on stderr before it; they are not part of the error.)
    """
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    assert "Traceback" not in error, error
    last = error.rstrip("\n").split("\n")[-1].rpartition("\r")[2]
    assert last.startswith("slice-st: error: ") and error.count("slice-st: error: ") == 1, error
    return last


def _model_copy(tiny_model_dir, tmp_path, name="model"):
    """A sentence-transformers folder of the tiny model (weights, config, tokenizer) to break on purpose."""
    folder = tmp_path / name
    slice_st.load_model(tiny_model_dir).save(str(folder))
    return folder


# ------------------------------------------------------------------------------------------ B6, B14 (models)
def test_b06_model_without_vocabulary_is_refused(tiny_model_dir, tmp_path, capsys):
    folder = _model_copy(tiny_model_dir, tmp_path)
    for name in ("tokenizer.json", "vocab.txt"):
        if (folder / name).exists():
            os.remove(folder / name)
    with pytest.raises(slice_st.ModelLoadError, match="tokens but the model has 30522 token embeddings"):
        slice_st.load_model(str(folder))
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    assert "vocabulary files" in _fails(capsys, "mine", "-q", "guitar", corpus, "-m", folder)


@pytest.mark.parametrize("breakage", ["a_file", "no_weights", "truncated_weights", "bad_config", "offline_hub_id"])
def test_b14_unloadable_models_are_one_clean_error(tiny_model_dir, tmp_path, capsys, breakage, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    if breakage == "a_file":
        model, expected = corpus, "is a file, not a model folder"
    elif breakage == "offline_hub_id":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        model, expected = "nobody-here/no-such-model", "HF_HUB_OFFLINE is set"
    else:
        model = _model_copy(tiny_model_dir, tmp_path)
        weights = model / "model.safetensors"
        if breakage == "no_weights":
            os.remove(weights)
        elif breakage == "truncated_weights":
            weights.write_bytes(weights.read_bytes()[:1000])
        else:
            (model / "config.json").write_text("{oops")
        expected = f"Cannot load the model in {model}"
    with pytest.raises(slice_st.ModelLoadError):
        slice_st.load_model(str(model))
    assert expected in _fails(capsys, "mine", "-q", "guitar", corpus, "-m", model)


@pytest.mark.parametrize(
    "device, expected", [("banana", "Unknown device 'banana'"), ("cuda:7", "cuda:7"), ("", "A device is a name")]
)
def test_b15_bad_devices_are_refused_before_loading(tmp_path, capsys, monkeypatch, device, expected):
    import torch

    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    import sentence_transformers

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", lambda *a, **k: pytest.fail("the model loaded"))
    assert expected in _fails(capsys, "mine", "-q", "guitar", corpus, "--device", device)
    assert expected in _fails(capsys, "index", "build", corpus, "-o", tmp_path / "ix", "--device", device)


# ------------------------------------------------------------------------------------------ B7, B8, B9, B21 (reading
# files)
SEPARATORS = ["\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]


def test_b07_lines_end_only_at_newline(tmp_path, tiny_model_dir, capsys):
    path = tmp_path / "odd.txt"
    lines = [f"line {n} has a{sep}separator inside" for n, sep in enumerate(SEPARATORS, start=1)] + ["the last line"]
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    records = read_texts([str(path)])
    assert [(r.line, r.text) for r in records] == list(enumerate(lines, start=1))
    content = path.read_bytes().decode("utf-8")
    assert all(content[r.file_offset : r.file_offset + len(r.text)] == r.text for r in records)
    assert [d.id for d in read_corpus([str(path)])][-1] == f"{path}:{len(lines)}"
    queries = tmp_path / "queries.txt"
    queries.write_bytes("the last\u2028line\nseparator\x85inside\n".encode("utf-8"))
    code, out = _run(capsys, "mine", "--queries", queries, path, "-m", tiny_model_dir, "-f", "jsonl", "-k", "1")
    assert [json.loads(row)["query"] for row in out.out.split("\n") if row] == [
        "the last\u2028line",
        "separator\x85inside",
    ]


def test_b08_paragraph_offsets_of_crlf_files_are_file_offsets(tmp_path, tiny_model_dir, capsys):
    path = tmp_path / "crlf.txt"
    path.write_bytes(
        b"first paragraph line one\r\nline two of it\r\n\r\nsecond paragraph\r\nwith a guitar in line two\r\n"
    )
    content = path.read_bytes().decode("utf-8")
    records = read_texts([str(path)], "paragraph")
    assert [(r.line, r.text) for r in records] == [
        (1, "first paragraph line one\r\nline two of it"),
        (4, "second paragraph\r\nwith a guitar in line two"),
    ]
    code, out = _run(
        capsys, "mine", "-q", "a guitar", path, "--split", "paragraph", "-m", tiny_model_dir, "-f", "jsonl"
    )
    for row in map(json.loads, out.out.splitlines()):
        assert content[row["file_start"] : row["file_end"]] == row["span"]


def test_b09_jsonl_strings_may_hold_line_separators(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes('{"id": "a", "text": "one\u2028two\x85three"}\n{"id": "b", "text": "plain"}\n'.encode("utf-8"))
    assert [(d.id, d.text, d.line) for d in read_jsonl(str(path))] == [
        ("a", "one\u2028two\x85three", 1),
        ("b", "plain", 2),
    ]


def test_b21_byte_order_mark_is_not_text(tmp_path, tiny_model_dir, capsys):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffguitar lessons today\nsecond line\n".encode("utf-8"))
    records = read_texts([str(path)])
    assert records[0].text == "guitar lessons today" and records[0].file_offset == 1
    code, out = _run(capsys, "mine", "-q", "guitar", path, "-m", tiny_model_dir, "-f", "jsonl", "--max-span", "1")
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert all("\ufeff" not in row["span"] for row in rows)
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes('\ufeff{"id": "a", "text": "with a mark"}\n'.encode("utf-8"))
    assert [d.text for d in read_jsonl(str(jsonl))] == ["with a mark"]


# ------------------------------------------------------------------------------------------ B10
def test_b10_token_units_cut_unspaced_script_between_tokens(tiny_model_short, tiny_model):
    text = "东京中文字" * 20  # 100 characters, 100 tokens, no space: one "word" of 100 tokens
    with pytest.raises(SpanInputError, match="word of 100 tokens"):
        tiny_model_short.encode_spans(text, max_span=3)  # word units: as documented, use unit='token'
    windowed = tiny_model_short.encode_spans(text, max_span=3, unit="token")
    whole = tiny_model.encode_spans(text, max_span=3, unit="token")  # one window of the bigger model
    np.testing.assert_array_equal(windowed.offsets, whole.offsets)
    np.testing.assert_array_equal(windowed.units, whole.units)
    index = SpanIndex.build([text * 3, "a short one"], tiny_model_short, unit="token", max_span=3)
    assert len(index.search("中文", top_k=3)[0]) == 3


# ------------------------------------------------------------------------------------------ B11, B20 (unreadable input)
def test_b11_unreadable_input_file(tmp_path, capsys, monkeypatch):
    path = tmp_path / "secret.txt"
    path.write_text("a man plays the guitar\n")
    real_open = builtins.open

    def denying_open(file, *args, **kwargs):
        if os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(file, *args, **kwargs)

    real_os_open = os.open

    def denying_os_open(file, *args, **kwargs):  # corpora are opened with os.open (only regular files are read)
        if os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_os_open(file, *args, **kwargs)

    from slice_st.text import FileAccessError

    monkeypatch.setattr(builtins, "open", denying_open)
    monkeypatch.setattr(os, "open", denying_os_open)
    with pytest.raises(FileAccessError, match="cannot read .*secret.txt: Permission denied"):
        read_texts([str(path)])
    assert "Permission denied" in _fails(capsys, "mine", "-q", "guitar", path)
    assert "Permission denied" in _fails(capsys, "index", "build", path, "-o", tmp_path / "ix")
    assert "Permission denied" in _fails(capsys, "mine", "--queries", path, path)


def test_b20_non_utf8_standard_input(tmp_path, capsys, monkeypatch):
    raw = "café\n".encode("latin-1")  # not UTF-8
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", errors="surrogateescape"))
    assert "standard input is not UTF-8" in _fails(capsys, "mine", "-q", "coffee", "-")


# ------------------------------------------------------------------------------------------ B14 (API values), B16–B19
def test_b14_search_threshold_must_be_a_number(tiny_model):
    index = SpanIndex.build(["a man plays the guitar"], tiny_model, max_span=3)
    with pytest.raises(SpanInputError, match="threshold must be a number"):
        index.search("guitar", threshold="0.5")


def test_b16_unit_must_match_the_index(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    _run(
        capsys,
        "index",
        "build",
        corpus,
        "-o",
        tmp_path / "ix",
        "-m",
        tiny_model_dir,
        "--max-span",
        "3",
        "--no-progress",
    )
    assert "this index holds word spans" in _fails(
        capsys, "mine", "--index", tmp_path / "ix", "-q", "guitar", "--unit", "token"
    )
    assert _run(capsys, "mine", "--index", tmp_path / "ix", "-q", "guitar", "--unit", "word")[0] == 0
    assert "needs --index" in _fails(capsys, "mine", "-q", "guitar", corpus, "--approximate")


def test_b17_huge_sizes_are_capped(tiny_model, monkeypatch):
    capped = tiny_model.encode_spans("a man plays the guitar", max_span=10**9)  # no 72 GB allocation
    assert len(capped) == len(tiny_model.encode_spans("a man plays the guitar", max_span=5))
    result = tiny_model.best_spans(["guitar"], ["a man plays", "the guitar"], top_k=10**7, max_span=2, overlap=True)
    assert result.scores.shape[2] < 1000 and len(result[0][1]) == 3
    disjoint = tiny_model.best_spans(["guitar"], ["a man plays", "the guitar"], top_k=10**7, max_span=2)
    assert disjoint.scores.shape[2] < 1000 and len(disjoint[0][1]) == 1  # "the guitar", "the", "guitar" overlap
    index = SpanIndex.build(["a man plays the guitar", "the dog barks"], tiny_model, max_span=3)
    real_scan = slice_st.index.span_index.top_spans_flat
    asked = []

    def scan(queries, unit_vectors, span_norms, top_k, *args, **kwargs):
        asked.append(top_k)
        assert top_k <= 1000, "top_k was not capped"
        return real_scan(queries, unit_vectors, span_norms, top_k, *args, **kwargs)

    monkeypatch.setattr(slice_st.index.span_index, "top_spans_flat", scan)
    assert (
        len(index.search("guitar", top_k=10**7, overlap=True)[0]) == 5 * 3 - 3 + 3 * 3 - 3
    )  # every span of both documents
    assert len(index.search("guitar", top_k=10**7, per_document=1)[0]) == 2
    with pytest.raises(SpanInputError, match="min_span=200 is longer than a model window"):
        tiny_model.encode_spans("a b", min_span=200, max_span=10**9)


@pytest.mark.parametrize("top_k", [-1, 0, 1.5, True])
def test_b18_ranked_top_k_is_checked(tiny_model, top_k):
    result = tiny_model.best_spans(["guitar"], ["a guitar", "the man", "x"], max_span=2)
    assert len(result.ranked(0, top_k=None)) == 3
    with pytest.raises(SpanInputError, match="top_k must be a positive integer"):
        result.ranked(0, top_k=top_k)


def test_b18_nan_threshold_is_one_error_everywhere(tiny_model, tiny_model_dir, tmp_path, capsys):
    nan = float("nan")
    result = tiny_model.best_spans(["guitar"], ["a guitar"], max_span=2)
    index = SpanIndex.build(["a guitar"], tiny_model, max_span=2)
    sharded = slice_st.index.ShardedSpanIndex([index])
    for call in (
        lambda: result.ranked(0, threshold=nan),
        lambda: index.search("guitar", threshold=nan),
        lambda: sharded.search("guitar", threshold=nan),
        lambda: index.search("guitar", threshold=float("inf")),
    ):
        with pytest.raises(SpanInputError, match="threshold must be a finite number"):
            call()
    corpus = tmp_path / "c.txt"
    corpus.write_text("a guitar\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["mine", "-q", "guitar", str(corpus), "--threshold", "nan", "-m", tiny_model_dir])
    assert exit_info.value.code == 2 and "must be a finite number" in capsys.readouterr().err


def test_b19_mine_names_the_bad_line_and_can_skip_it(tmp_path, capsys, make_tiny_model, tiny_model_dir, monkeypatch):
    short = make_tiny_model(24)
    monkeypatch.setattr(slice_st, "load_model", lambda *a, **k: short)
    first, second = tmp_path / "one.txt", tmp_path / "two.txt"
    first.write_text("the dog barks\n")
    second.write_text("a man plays the guitar\n" + "." * 80 + " tail\nmy bag was lost\n")
    error = _fails(capsys, "mine", "-q", "guitar", first, second, "--max-span", "3")
    assert f"{second}:2: a word of" in error and "--skip-bad" in error
    error = _fails(capsys, "index", "build", first, second, "-o", tmp_path / "ix", "--max-span", "3")
    assert f"Document '{second}:2': a word of" in error and "--skip-bad" in error
    code, out = _run(capsys, "mine", "-q", "guitar", first, second, "--max-span", "3", "--skip-bad", "-f", "jsonl")
    assert code == 0 and f"skipped {second}:2" in out.err and "1 texts skipped" in out.err
    assert {(row["file"], row["line"]) for row in map(json.loads, out.out.splitlines())} == {
        (str(first), 1),
        (str(second), 1),
        (str(second), 3),
    }


# ------------------------------------------------------------------------------------------ B22, B24, B25
def test_b22_one_file_under_two_spellings_is_indexed_once(tmp_path, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("a man plays the guitar\nthe dog barks\n")
    assert [d.id for d in read_corpus(["./a.txt"])] == ["a.txt:1", "a.txt:2"]  # normalised ids
    with pytest.raises(CorpusError, match="are the same file"):
        read_corpus(["a.txt", "./a.txt"])
    os.symlink(tmp_path / "a.txt", tmp_path / "link.txt")
    assert "are the same file" in _fails(
        capsys, "index", "build", "a.txt", "link.txt", "-o", "ix", "-m", tiny_model_dir
    )
    _run(capsys, "index", "build", "a.txt", "-o", "ix", "-m", tiny_model_dir, "--no-progress")
    assert "Duplicate document id 'a.txt:1'" in _fails(capsys, "index", "add", "ix", "./a.txt")
    assert "already in the index as a.txt" in _fails(capsys, "index", "add", "ix", str(tmp_path / "a.txt"))
    assert "already in the index as a.txt" in _fails(capsys, "index", "add", "ix", "link.txt")
    assert len(SpanIndex.load("ix")) == 2


def test_b24_make_passages_from_nothing_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "no passages from" in _fails(capsys, "make-passages", empty, "-o", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert "is a file, not a folder" in _fails(capsys, "make-passages", empty, "-o", empty)


def test_b25_ctrl_c_is_one_line_not_a_traceback(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    code = (
        "import sys, slice_st.cli.mine as mine\n"
        "def interrupted(*args, **kwargs):\n"
        "    raise KeyboardInterrupt\n"
        "mine.read_texts = interrupted\n"
        "from slice_st.cli import main\n"
        f"sys.exit(main(['mine', '-q', 'guitar', {str(corpus)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 130 and done.stderr == "slice-st: interrupted\n", done.stderr[-2000:]


def test_mine_plans_windows_once_and_best_spans_can_skip(tmp_path, capsys, make_tiny_model, monkeypatch):
    """``slice-st mine`` plans each text's windows once (inside best_spans), and names every unwindowable text."""
    import slice_st.encode
    import slice_st.tokens
    from slice_st.encode import SpanInputError

    short = make_tiny_model(24)
    monkeypatch.setattr(slice_st, "load_model", lambda *a, **k: short)
    calls = []
    for module in (slice_st.tokens, slice_st.encode):
        original = module.plan_windows
        monkeypatch.setattr(
            module, "plan_windows", lambda *a, _original=original, **k: calls.append(list(a[1])) or _original(*a, **k)
        )
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n" + "." * 80 + " tail\n" + "," * 80 + "\nmy bag was lost\n")
    error = _fails(capsys, "mine", "-q", "guitar", corpus, "--max-span", "3")
    assert f"{corpus}:2: a word of" in error and "(and 1 more)" in error
    calls.clear()
    code, out = _run(capsys, "mine", "-q", "guitar", corpus, "--max-span", "3", "--skip-bad", "-f", "jsonl")
    assert code == 0 and "2 texts skipped" in out.err
    assert sum("my bag was lost" in texts for texts in calls) == 1  # the corpus: once (the query is planned on its own)
    texts = ["a man plays the guitar", "." * 80 + " tail"]
    result = slice_st.encode.best_spans(short, "guitar", texts, max_span=3, on_error="skip")
    assert [index for index, _ in result.skipped] == [1] and result[0][1] == [] and result[0][0]
    with pytest.raises(SpanInputError, match="Text 1: a word of") as raised:
        slice_st.encode.best_spans(short, "guitar", texts, max_span=3)
    assert raised.value.text_index == 1
    with pytest.raises(SpanInputError, match="on_error"):
        slice_st.encode.best_spans(short, "guitar", texts, on_error="ignore")
