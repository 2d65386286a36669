"""The passages builder (slice_st.data.passages) and ``slice-st make-passages``: texts read as ``mine`` reads them
(--split, folders, globs), passages cut from one document in order, dev sentences kept out."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from helpers import cli_fails, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from slice_st.data.passages import (
    cut_passages,
    evaluation_sentences,
    load_passages,
    read_texts,
    split_sentences,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DEV = str(FIXTURES / "stsb_context_sample.tsv")
#: Two hard-wrapped licences in the project's own words (the training guide's example reads them too).
LICENCES = ROOT / "examples" / "licences"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _saved_passages(folder: Path) -> list[str]:
    from datasets import load_from_disk

    return list(load_from_disk(str(folder))["text"])


def test_cut_passages_keeps_lengths_and_excludes_dev_sentences():
    document = " ".join(f"Sentence number {i} is here." for i in range(60))
    singles = [f"A short line {i}." for i in range(40)]
    excluded = {"Sentence number 7 is here.", "a short  line 3."}
    ds = cut_passages(
        [document, *singles], min_words=10, max_words=30, exclude_sentences=excluded, seed=1
    )
    assert len(ds) > 5
    for text in ds["text"]:
        assert 10 <= len(text.split()) <= 30
        assert "number 7 is" not in text and "line 3." not in text
    assert (
        sum("Sentence number" in text and "short line" in text for text in ds["text"]) <= 1
    )  # documents stay whole
    again = cut_passages(
        [document, *singles], min_words=10, max_words=30, exclude_sentences=excluded, seed=1
    )
    assert again["text"] == ds["text"]
    with pytest.raises(ValueError, match="min_words"):
        cut_passages(["x"], min_words=5, max_words=2)


def test_read_texts_formats_and_errors(tmp_path):
    from datasets import Dataset

    (tmp_path / "a.txt").write_text("First line.\n\nSecond line.\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(
        json.dumps({"text": "JSON text."}) + "\n" + json.dumps({"text": "More."}) + "\n",
        encoding="utf-8",
    )
    (tmp_path / "c.tsv").write_text("d1\tDo n't stop .\nd2\tIt 's fine .\n", encoding="utf-8")
    Dataset.from_dict({"text": ["From datasets."]}).save_to_disk(str(tmp_path / "ds"))
    assert read_texts(tmp_path / "a.txt") == ["First line.", "Second line."]
    assert read_texts(tmp_path / "b.jsonl") == ["JSON text.", "More."]
    assert read_texts(tmp_path / "c.tsv") == ["Do n't stop .", "It 's fine ."]
    assert read_texts(tmp_path / "ds") == ["From datasets."]
    with pytest.raises(FileNotFoundError):
        read_texts(tmp_path / "missing.txt")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{broken\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        read_texts(tmp_path / "bad.jsonl")
    (tmp_path / "nofield.jsonl").write_text('{"body": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="'text'"):
        read_texts(tmp_path / "nofield.jsonl")
    with pytest.raises(TypeError, match="not a string"):
        read_texts(["fine", 3])
    assert split_sentences("One. Two! Three?") == ["One.", "Two!", "Three?"]


def test_load_passages_never_contains_dev_sentences(tmp_path):
    dev = evaluation_sentences([DEV])
    assert dev
    leaked = sorted(dev)[:3]
    (tmp_path / "corpus.txt").write_text(
        "\n".join([" ".join(leaked + ["Something else entirely happened today."] * 3)] * 2),
        encoding="utf-8",
    )
    passages = load_passages(
        [str(tmp_path / "corpus.txt")], exclude_paths=[DEV], min_words=3, max_words=40
    )
    for text in passages["text"]:
        assert not any(sentence in text for sentence in leaked)
    with pytest.raises(ValueError, match="no distillation text"):
        load_passages([])


def test_read_texts_json_list(tmp_path):
    (tmp_path / "d.json").write_text(
        json.dumps([{"text": "One."}, {"text": "Two."}]), encoding="utf-8"
    )
    assert read_texts(tmp_path / "d.json") == ["One.", "Two."]
    (tmp_path / "e.json").write_text(json.dumps({"text": "x"}), encoding="utf-8")
    with pytest.raises(ValueError, match="JSON list"):
        read_texts(tmp_path / "e.json")


def test_a_wrapped_licence_gives_passages_of_one_file_in_order(tmp_path, capsys):
    """``--split auto`` (the default) reads a hard-wrapped licence by paragraphs and cuts passages from that file
    alone: each is a stretch of one file (up to whitespace), and together they hold nearly all its words."""
    code, out = run_cli(
        capsys,
        "make-passages",
        LICENCES,
        "-o",
        tmp_path / "out",
        "--min-words",
        "20",
        "--max-words",
        "40",
    )
    assert code == 0
    files = {
        path.name: _flat(path.read_text(encoding="utf-8"))
        for path in sorted(LICENCES.glob("*.txt"))
    }
    assert len(files) == 2 and all(
        re.search(r"\n\S[^\n]{50,}\n\S", p.read_text()) for p in LICENCES.glob("*.txt")
    )
    for name in files:
        assert f"{name}: --split auto reads one text per paragraph" in out.err
    passages = _saved_passages(tmp_path / "out")
    for passage in passages:
        assert 20 <= len(passage.split()) <= 40
        assert sum(passage in text for text in files.values()) == 1, passage
    words = sum(len(passage.split()) for passage in passages)
    assert (
        words >= sum(len(text.split()) for text in files.values()) - 2 * 20
    )  # at most a short end per file left out


def test_standard_input_is_read_as_a_file(tmp_path, capsys, monkeypatch):
    """``-`` reads standard input as ``mine`` does: a wrapped licence there is one document too."""
    licence = LICENCES / "harbour-licence.txt"
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(licence.read_bytes()), encoding="utf-8")
    )
    code, out = run_cli(capsys, "make-passages", "-", "-o", tmp_path / "out")
    assert code == 0 and "-: --split auto reads one text per paragraph" in out.err
    passages = _saved_passages(tmp_path / "out")
    assert passages and all(
        passage in _flat(licence.read_text(encoding="utf-8")) for passage in passages
    )


def test_wrapped_lines_read_one_per_text_are_warned_about(tmp_path, capsys):
    """``--split line`` on the same files: each wrapped line is a short text, glued with other files' (what the user
    asked for), with a warning per file naming the option that reads paragraphs."""
    pattern = str(LICENCES / "*.txt")  # a glob, as the shell would pass it quoted
    code, out = run_cli(capsys, "make-passages", pattern, "--split", "line", "-o", tmp_path / "out")
    assert code == 0
    warnings = [line for line in out.err.splitlines() if line.startswith("slice-st: warning: ")]
    assert len(warnings) == 2 and all(
        "hard-wrapped" in line and "--split auto" in line for line in warnings
    )
    files = [_flat(path.read_text(encoding="utf-8")) for path in LICENCES.glob("*.txt")]
    assert any(
        not any(passage in text for text in files) for passage in _saved_passages(tmp_path / "out")
    )
    code, out = run_cli(
        capsys, "make-passages", pattern, "--split", "line", "-o", tmp_path / "o2", "--quiet"
    )
    assert code == 0 and "slice-st: warning" not in out.err


def test_sources_are_files_folders_globs_and_saved_datasets(tmp_path, capsys):
    """A folder stands for the text files ``mine`` reads in it (recursively, hidden ones left out), a glob for its
    matches; a saved ``datasets`` folder is used as it is; a folder or pattern with no text file is one line."""
    from datasets import Dataset

    corpus = tmp_path / "corpus"
    (corpus / "deeper").mkdir(parents=True)
    sentence = "The {} committee met on a rainy Tuesday to discuss the budget for the next school year in detail."
    (corpus / "a.txt").write_text(sentence.format("first") + "\n", encoding="utf-8")
    (corpus / "deeper" / "b.md").write_text(sentence.format("second") + "\n", encoding="utf-8")
    (corpus / "c.jsonl").write_text(
        json.dumps({"text": sentence.format("third")}) + "\n", encoding="utf-8"
    )
    (corpus / ".hidden.txt").write_text(sentence.format("hidden") + "\n", encoding="utf-8")
    (corpus / "notes.csv").write_text(sentence.format("csv") + "\n", encoding="utf-8")
    Dataset.from_dict({"text": [sentence.format("saved")]}).save_to_disk(str(tmp_path / "saved"))
    texts = load_passages([str(corpus), str(tmp_path / "saved")], min_words=5, max_words=40)["text"]
    assert sorted(text.split()[1] for text in texts) == ["first", "saved", "second", "third"]
    texts = load_passages([str(corpus / "**" / "*.md")], min_words=5, max_words=40)["text"]
    assert [text.split()[1] for text in texts] == ["second"]
    (tmp_path / "empty").mkdir()
    assert "no .txt" in cli_fails(
        capsys, "make-passages", tmp_path / "empty", "-o", tmp_path / "out"
    )
    assert "no file matches" in cli_fails(
        capsys, "make-passages", tmp_path / "*.nothing", "-o", tmp_path / "out"
    )
    assert "same file" in cli_fails(
        capsys, "make-passages", corpus, corpus / "a.txt", "-o", tmp_path / "out"
    )
    assert not (tmp_path / "out").exists()


def test_read_texts_splits_as_mine_does(tmp_path):
    """``split``: per line, per file of paragraphs (one text, paragraphs a blank line apart), or ``auto``; ``report``
    hears auto's choice and hard-wrapped lines read one per text."""
    wrapped = LICENCES / "meadow-notice.txt"
    heard: list[tuple[str, str]] = []
    (text,) = read_texts(wrapped, report=lambda path, how: heard.append((path, how)))
    assert heard == [(str(wrapped), "paragraph")]
    assert "\n" not in text.split("\n\n")[3] and text.split("\n\n")[2] == "Preamble"
    assert _flat(text) == _flat(wrapped.read_text(encoding="utf-8"))
    lines = read_texts(wrapped, split="line", report=lambda path, how: heard.append((path, how)))
    assert heard[-1] == (str(wrapped), "wrapped-lines") and len(lines) > 20
    (tmp_path / "records.txt").write_text(
        "One record per line.\nAnother record here.\n", encoding="utf-8"
    )
    assert read_texts(tmp_path / "records.txt", split="paragraph") == [
        "One record per line. Another record here."
    ]
    assert read_texts(tmp_path / "records.txt") == ["One record per line.", "Another record here."]
    assert read_texts(["First part\n  of one.\n\n\nSecond  part."]) == [
        "First part of one.\n\nSecond part."
    ]
    with pytest.raises(ValueError, match="split must be"):
        read_texts(wrapped, split="sentence")


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(1, 30), min_size=1, max_size=12), min_size=1, max_size=4),
    min_words=st.integers(1, 12),
    extra=st.integers(0, 20),
    seed=st.integers(0, 3),
)
def test_passages_are_stretches_of_one_document(sizes, min_words, extra, seed):
    """Every passage of a document long enough is consecutive words of it, in the length range; the passages of a
    document follow each other and leave out at most a short end (fewer than ``min_words`` words)."""
    max_words = min_words + extra
    kept = {
        d: sentences for d, sentences in enumerate(sizes) if sum(sentences) >= min_words
    }  # shorter: glued
    documents = {d: [f"d{d}w{i}" for i in range(sum(sentences))] for d, sentences in kept.items()}
    texts = []
    for d, sentences in kept.items():
        ends = {sum(sentences[: k + 1]) - 1 for k in range(len(sentences))}
        texts.append(
            " ".join(word + ("." if i in ends else "") for i, word in enumerate(documents[d]))
        )
    passages = cut_passages(texts, min_words=min_words, max_words=max_words, seed=seed)["text"]
    covered: dict[int, list[tuple[int, int]]] = {}
    for passage in passages:
        words = [word.rstrip(".") for word in passage.split()]
        assert min_words <= len(words) <= max_words
        document = int(words[0][1 : words[0].index("w")])
        if document not in documents:  # glued from texts too short to be passages alone
            continue
        start = documents[document].index(words[0])
        assert documents[document][start : start + len(words)] == words, passage
        covered.setdefault(document, []).append((start, start + len(words)))
    for document, words in documents.items():
        spans = sorted(covered.get(document, []))
        assert [end for _, end in spans[:-1]] == [
            start for start, _ in spans[1:]
        ]  # no gap, no overlap
        assert spans and spans[0][0] == 0 and len(words) - spans[-1][1] < min_words
