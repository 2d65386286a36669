"""Naive reference helpers shared by the test modules (import as ``from helpers import ...``)."""

from __future__ import annotations

import os
import random
import re

import numpy as np
from hypothesis import strategies as st


def whitespace_words(text: str) -> list[tuple[int, int]]:
    """Character ranges of the whitespace-delimited words of ``text`` (what ``str.split()`` returns)."""
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def expected_span_units(num_units: int, min_span: int, max_span: int) -> list[tuple[int, int]]:
    """All (start, end) unit spans, start-major then by length (the library's documented order)."""
    return [
        (start, start + length)
        for start in range(num_units)
        for length in range(min_span, max_span + 1)
        if start + length <= num_units
    ]


def count_spans(num_units: int, min_span: int, max_span: int) -> int:
    return sum(max(0, num_units - length + 1) for length in range(min_span, max_span + 1))


def cosine(a, b) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# Words the MiniLM (BERT uncased) tokenizer keeps whole: no characters dropped by its normalizer, so a
# "word" (run of touching tokens) is exactly a whitespace-delimited word. 1..4 tokens each.
WORDS = [
    "a",
    "man",
    "plays",
    "the",
    "guitar.",
    "don't",
    "Café",
    "naïve",
    "résumé!",
    "😀",
    "🎸",
    "中文",
    "e.g.",
    "3.14",
    "$5",
    "—",
    "“quotes”",
    "internationalization",
    "x",
    "hello,world",
    "(parenthesis)",
    "ÜBER",
    "Straße",
    "xyzzy",
    "...",
    "?!",
    "über-cool",
    "it's",
    "Ω",
    "naïveté",
    "l'été",
    "東京",
    "İstanbul",
]
#: The words of WORDS with at most 2 tokens.
SHORT_WORDS = [
    "a",
    "man",
    "plays",
    "the",
    "guitar.",
    "Café",
    "naïve",
    "résumé!",
    "😀",
    "🎸",
    "中文",
    "$5",
    "—",
    "internationalization",
    "x",
    "ÜBER",
    "Straße",
    "?!",
    "Ω",
    "naïveté",
    "東京",
    "İstanbul",
]
SEPARATORS = [" ", " ", " ", "  ", "\t", "\n", " \n\t ", "\u3000", "\xa0"]


@st.composite
def texts(draw, min_words: int = 0, max_words: int = 12, vocabulary: list[str] = WORDS):
    """Random texts of ``vocabulary`` words with assorted whitespace (incl. leading/trailing)."""
    words = draw(st.lists(st.sampled_from(vocabulary), min_size=min_words, max_size=max_words))
    parts = [draw(st.sampled_from(["", " ", "\n  "]))]
    for index, word in enumerate(words):
        if index:
            parts.append(draw(st.sampled_from(SEPARATORS)))
        parts.append(word)
    parts.append(draw(st.sampled_from(["", " ", "\t\n"])))
    return "".join(parts)


def naive_token_vectors(model, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Content-token vectors of ``text`` from ``model.encode(output_value="token_embeddings")`` (special
    tokens dropped) and each content token's character offsets."""
    vectors = model.encode([text], output_value="token_embeddings")[0].float().cpu().numpy()
    encoded = model.tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    assert len(encoded["input_ids"]) == len(vectors), "no truncation expected here"
    keep = [i for i, special in enumerate(encoded["special_tokens_mask"]) if not special]
    return vectors[keep].astype(np.float64), [tuple(encoded["offset_mapping"][i]) for i in keep]


def naive_word_span_vectors(
    model, text: str, min_span: int, max_span: int
) -> dict[tuple[int, int], np.ndarray]:
    """(start word, end word) → mean of the content-token vectors of those whitespace words."""
    vectors, offsets = naive_token_vectors(model, text)
    words = whitespace_words(text)
    token_word = [
        next(w for w, (s, e) in enumerate(words) if s <= start < e) for start, _ in offsets
    ]
    spans = {}
    for start, end in expected_span_units(len(words), min_span, max_span):
        rows = [i for i, w in enumerate(token_word) if start <= w < end]
        spans[(start, end)] = vectors[rows].mean(axis=0)
    return spans


def naive_token_span_vectors(
    model, text: str, min_span: int, max_span: int
) -> dict[tuple[int, int], np.ndarray]:
    vectors, _ = naive_token_vectors(model, text)
    return {
        span: vectors[span[0] : span[1]].mean(axis=0)
        for span in expected_span_units(len(vectors), min_span, max_span)
    }


def cli_error(argv, capsys) -> str:
    """Run ``slice-st argv``, expect exit 2 with one ``slice-st: error:`` line and no traceback; return that line."""
    import pytest

    from slice_st.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    last = error.strip().splitlines()[-1]
    assert last.startswith("slice-st: error:") and "Traceback" not in error, error
    return last


def file_tree(path) -> dict[str, bytes]:
    """Every file under ``path`` (links not followed) and its bytes: what must not change."""
    found = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if os.path.islink(full):
                found[os.path.relpath(full, path)] = b"LINK"
            else:
                with open(full, "rb") as handle:
                    found[os.path.relpath(full, path)] = handle.read()
    return found


def deny_writes(monkeypatch, directory) -> None:
    """Make ``directory`` read-only; as root (who may write anyway) also make ``os.access`` say so."""
    os.chmod(directory, 0o555)
    if os.geteuid() == 0:
        real_access = os.access
        denied = os.path.realpath(directory)

        def access(path, mode, *args, **kwargs):
            if os.path.realpath(path) == denied and mode & os.W_OK:
                return False
            return real_access(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", access)


def run_cli(capsys, *argv):
    """Run ``slice-st argv`` in-process: its exit code and what it printed."""
    from slice_st.cli import main

    code = main([str(a) for a in argv])
    return code, capsys.readouterr()


def build_index_cli(capsys, corpus, output, model, *more):
    """``slice-st index build CORPUS -o OUTPUT -m MODEL --no-progress MORE…`` in-process: its exit code and output."""
    return run_cli(
        capsys, "index", "build", corpus, "-o", output, "-m", model, "--no-progress", *more
    )


def cli_fails(capsys, *argv) -> str:
    """Run ``slice-st argv`` expecting exit 2 and one line ``slice-st: error: …`` (no traceback); return that line.

    (Loading a model may draw progress bars on stderr before it; they are not part of the error.)
    """
    import pytest

    from slice_st.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    assert "Traceback" not in error, error
    last = error.rstrip("\n").split("\n")[-1].rpartition("\r")[2]
    assert last.startswith("slice-st: error: ") and error.count("slice-st: error: ") == 1, error
    return last


# ------------------------------------------------------------------------------------ the test Hub's clients
HUB_TOKEN = "hf_test_token"


def hub_env(
    url: str, home, *, token: str | None = HUB_TOKEN, offline: bool = False
) -> dict[str, str]:
    """The environment of a process that uses the test Hub at ``url`` with the cache folder ``home``, as a user's
    would: ``HF_ENDPOINT`` there, ``HF_HUB_OFFLINE`` off (unless ``offline``), a token unless ``token=None``, and
    ``HF_HUB_DISABLE_XET=1`` (the test Hub stores large files over LFS; it offers no Xet storage)."""
    import os

    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
    }
    env.update(
        HF_ENDPOINT=url,
        HF_HOME=str(home),
        HF_HUB_OFFLINE="1" if offline else "0",
        TRANSFORMERS_OFFLINE="1" if offline else "0",
        HF_HUB_DISABLE_XET="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        SLICE_ST_THREADS="1",
    )
    if token:
        env["HF_TOKEN"] = token
    return env


def hub_file(
    url: str, repo_id: str, path: str, revision: str = "main", token: str | None = HUB_TOKEN
) -> bytes:
    """A file of a repository of the test Hub over plain HTTP (the LFS redirect followed)."""
    import urllib.request

    request = urllib.request.Request(f"{url}/{repo_id}/resolve/{revision}/{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


def hub_json(url: str, path: str, token: str | None = HUB_TOKEN):
    """A JSON answer of the test Hub's API (``path`` without the leading slash) over plain HTTP."""
    import json
    import urllib.request

    request = urllib.request.Request(f"{url}/{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


# A random corpus over a small vocabulary, shared by the index tests and the CLI tests.
VOCABULARY = (
    "the a man woman child dog cat plays played is was guitar piano song loud quietly on stage in park "
    "flight delayed late gate bag lost found luggage refund ticket agent customer phone call said "
    "yesterday today tomorrow very not happy sad red blue green car train bus house river, city. it's don't"
).split()


def make_docs(count: int, seed: int = 0, low: int = 3, high: int = 30) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(low, high)))
        for _ in range(count)
    ]


QUERIES = ["a man plays the guitar", "my bag was lost", "the flight was delayed", "dog"]


#: STS-B-style pairs ``(sentence1, sentence2, score)`` for calibrating an index on the STS scale.
STS_ROWS = [
    ("A man is playing a guitar.", "A man plays the guitar.", 4.8),
    ("A woman is slicing an onion.", "A woman cuts an onion.", 4.2),
    ("A dog runs in the park.", "A cat sleeps on the sofa.", 0.6),
    ("The flight was delayed.", "The plane left late.", 3.9),
    ("Children are playing football.", "A chef is cooking pasta.", 0.0),
    ("A man is riding a horse.", "A person rides a horse.", 4.0),
    ("The stock market fell.", "A girl is dancing.", 0.2),
    ("Two men are talking.", "Two people are having a chat.", 3.6),
]
