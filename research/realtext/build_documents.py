"""Rebuilds ``documents.jsonl`` (the real-text dev set's paragraphs) from the files it was cut from, on a machine
that has them (the project venv's site-packages, /usr/share/common-licenses, the chatterbot-corpus 1.3.3 wheel).
The committed ``documents.jsonl`` is what the dev set uses; this script records how it was made.

    python research/realtext/build_documents.py --site-packages .venv/lib/python3.11/site-packages \
        --chatterbot /tmp/chatterbot_corpus --out research/realtext/documents.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKUP = re.compile(r"`|\*\*|(?<!\w)_(?=\w)|(?<=\w)_(?!\w)|<[^>]+>")

#: (document id, domain, source path (relative to its root), root, licence, provenance note)
LEGAL = [
    (
        "zlib",
        "numpy/_core/include/numpy/random/LICENSE.txt",
        "Zlib",
        "the zlib licence as shipped in numpy 2.4.6",
    ),
    (
        "bsd3",
        "/usr/share/common-licenses/BSD",
        "BSD-3-Clause",
        "Debian's copy of the BSD-3-Clause licence",
    ),
    (
        "mit",
        "execnet-2.1.2.dist-info/licenses/LICENSE",
        "MIT",
        "the MIT licence as shipped in execnet 2.1.2",
    ),
    (
        "hpnd",
        "pillow-13.0.0.dist-info/licenses/LICENSE",
        "MIT-CMU",
        "the PIL (MIT-CMU/HPND) licence, pillow 13.0.0",
    ),
    (
        "apache2",
        "/usr/share/common-licenses/Apache-2.0",
        "Apache-2.0",
        "Debian's copy of the Apache License 2.0",
    ),
    (
        "mpl2",
        "/usr/share/common-licenses/MPL-2.0",
        "MPL-2.0",
        "Debian's copy of the Mozilla Public License 2.0",
    ),
]
TECH = [
    (
        "rich",
        "rich-15.0.0.dist-info/METADATA",
        "MIT",
        "README of rich 15.0.0 (PyPI long description)",
    ),
    (
        "typer",
        "typer-0.29.2.dist-info/METADATA",
        "MIT",
        "README of typer 0.29.2 (PyPI long description)",
    ),
    (
        "httpx",
        "httpx-0.28.1.dist-info/METADATA",
        "BSD-3-Clause",
        "README of httpx 0.28.1 (PyPI long description)",
    ),
    ("requests", "requests-2.34.2.dist-info/METADATA", "Apache-2.0", "README of requests 2.34.2"),
    (
        "pysbd",
        "pysbd-0.3.4.dist-info/METADATA",
        "MIT",
        "README of pysbd 0.3.4 (PyPI long description)",
    ),
    (
        "bm25s",
        "bm25s-0.3.16.dist-info/METADATA",
        "MIT",
        "README of bm25s 0.3.16 (PyPI long description)",
    ),
]
DIALOGUE = [
    "tech_support",
    "computers",
    "conversations",
    "emotion",
    "money",
    "health",
    "food",
    "greetings",
]


def clean(text: str) -> str:
    """One paragraph as plain text: markdown links and emphasis dropped, lines joined, spaces collapsed."""
    text = _MARKUP.sub("", _LINK.sub(r"\1", text))
    text = re.sub(r"(?<!\w)\*+(?!\w)|-{3,}", " ", text)  # MPL-2.0's boxed sections
    return re.sub(r"\s+", " ", text).strip()


def prose_paragraphs(raw: str, markdown: bool) -> list[str]:
    """The paragraphs of a file that read as prose (at least 12 words, no code, tables or headings)."""
    if markdown:
        raw = raw.split("\n\n", 1)[1]  # METADATA: the headers end at the first blank line
        raw = re.sub(r"```.*?```", "\n\n", raw, flags=re.S)
    out = []
    for block in re.split(r"\n\s*\n", raw):
        lines = [line for line in block.splitlines() if line.strip()]
        skip = ("#", "|", "<", ">>>", "$", "    ")  # headings, tables, HTML, code
        if not lines or any(line.lstrip().startswith(skip) for line in lines if markdown):
            continue
        text = clean(block)
        if len(text.split()) >= 12 and not text.lower().startswith(("copyright", "http")):
            out.append(text)
    return out


def dialogue_paragraphs(path: Path, per_paragraph: int = 4) -> list[str]:
    """A chatterbot-corpus file's distinct conversations, ``per_paragraph`` exchanges to a paragraph, each turn on
    its own sentence as ``A: ...`` / ``B: ...`` (the corpus lists a statement and its answers)."""
    import yaml

    seen, exchanges = set(), []
    for turns in yaml.safe_load(path.read_text(encoding="utf-8"))["conversations"]:
        key = tuple(str(turn) for turn in turns)
        if key in seen or len(turns) < 2:
            continue
        seen.add(key)
        exchanges.append(" ".join(f"{'AB'[i % 2]}: {clean(str(t))}" for i, t in enumerate(key)))
    return [
        " ".join(exchanges[i : i + per_paragraph]) for i in range(0, len(exchanges), per_paragraph)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site-packages", type=Path, required=True)
    parser.add_argument(
        "--chatterbot", type=Path, required=True, help="the unpacked chatterbot_corpus package"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for domain, table, markdown in (("legal", LEGAL, False), ("tech", TECH, True)):
        for doc, path, licence, note in table:
            raw = (args.site_packages / path if not path.startswith("/") else Path(path)).read_text(
                encoding="utf-8"
            )
            raw = raw.split("\n----\n", 1)[
                0
            ]  # pillow's file: PIL's own licence, not the bundled ones after it
            for n, text in enumerate(prose_paragraphs(raw, markdown)):
                rows.append(
                    {
                        "id": f"{doc}-{n}",
                        "doc": doc,
                        "domain": domain,
                        "licence": licence,
                        "source": note,
                        "text": text,
                    }
                )
    for name in DIALOGUE:
        for n, text in enumerate(
            dialogue_paragraphs(args.chatterbot / "data" / "english" / f"{name}.yml")
        ):
            rows.append(
                {
                    "id": f"{name}-{n}",
                    "doc": name,
                    "domain": "dialogue",
                    "licence": "BSD-3-Clause",
                    "source": f"chatterbot-corpus 1.3.3, data/english/{name}.yml",
                    "text": text,
                }
            )
    with args.out.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} paragraphs → {args.out}")


if __name__ == "__main__":
    main()
