"""A griffe extension for the API reference: doctest examples (``>>>`` lines and their output) become code blocks.

Docstrings here follow sentence-transformers' style, with doctests inline as well as under ``Example:``. Left as
text, an output such as ``result[0][1]`` reads as a Markdown reference link; fenced, it renders as Python.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    """``text`` with every run of ``>>>``/``...`` lines and the output after them (up to a blank line) fenced."""
    out: list[str] = []
    lines = text.split("\n")
    index, fenced = 0, False
    while index < len(lines):
        line = lines[index]
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced or not line.lstrip().startswith(">>>"):
            out.append(line)
            index += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(indent + "```pycon")
        while index < len(lines) and lines[index].strip():
            out.append(lines[index])
            index += 1
        out.append(indent + "```")
    return "\n".join(out)


class FenceDoctests(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
