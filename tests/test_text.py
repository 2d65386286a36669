"""slice_st.text: sentence splitting through pysbd (abbreviations kept whole), and require() for optional extras."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slice_st.text import MissingExtraError, require, split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mr. Howard arrived late. Nobody minded.", ["Mr. Howard arrived late.", "Nobody minded."]),
        (
            "He served in the U.S. Military for ten years. Then he retired.",
            ["He served in the U.S. Military for ten years.", "Then he retired."],
        ),
        (
            "Bring tools, e.g. for cutting wood. We start at nine.",
            ["Bring tools, e.g. for cutting wood.", "We start at nine."],
        ),
        ("It cost 3.5 dollars. Dr. Smith paid.", ["It cost 3.5 dollars.", "Dr. Smith paid."]),
        ('She said "Go." Then she left.', ['She said "Go."', "Then she left."]),
        ('An unopened quote ends here." And then more.', ['An unopened quote ends here."', "And then more."]),
        ("one line\nanother line", ["one line", "another line"]),
        ("No sentence end here", ["No sentence end here"]),
        ("   ", []),
    ],
)
def test_split_sentences_keeps_abbreviations(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_is_the_same_function_for_passages():
    from slice_st.data import passages

    assert passages.split_sentences is split_sentences


def test_require_names_the_extra():
    assert require("json", "train").__name__ == "json"
    with pytest.raises(MissingExtraError, match=r"pip install 'slice-st\[eval\]'") as caught:
        require("surely_not_installed_module", "eval", "the BM25 baseline")
    assert isinstance(caught.value, ImportError) and "the BM25 baseline" in str(caught.value)


def test_missing_extra_message_in_a_fresh_process():
    """With pysbd hidden, splitting sentences says which extra to install (not a bare ModuleNotFoundError)."""
    code = (
        "import sys; sys.modules['pysbd'] = None\n"
        "from slice_st.text import split_sentences\n"
        "try:\n    split_sentences('One. Two.')\nexcept ImportError as error:\n    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install 'slice-st[train]'" in done.stdout, done.stderr
