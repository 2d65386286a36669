"""Readers for the neighbouring systems' benchmarks: PEARL's phrase tasks and Nugget's ParaBank PI.

* **BIRD** (``bird/bird.txt``): TSV with a header; ``term1``, ``term2`` and ``relatedness score``.
* **Turney** (``turney/turney.txt``): ``bigram | answer | word1 | word2 | distractor...`` per line. As
  in PEARL's evaluation code the bigram's own two words are left out of the candidates (5 choices).
* **PPDB / PPDB-filtered** (``ppdb/ppdb.json``, ``ppdb/ppdb_filtered.json``): a JSON array of
  ``[phrase1, phrase2, "pos" | "neg", (score)]``. The files hold no train/test split.
* **CoNLL-03 entities** (``conll2003/test.json`` as PEARL used, or ``all_data_small.json``): JSON
  lines ``{"sentences": [[tokens]], "ner": [[[start, end, type]]]}`` (inclusive token ends); like
  PEARL, the first sentence of a line, types PER, LOC and ORG.
* **ParaBank paraphrase identification** (Nugget; ``paraphrase_identification/{split}/``):
  ``docs.txt`` (``id TAB document``) and ``task.jsonl`` (``source``, 20 ``candidates``, ``answer``).

Bad input raises :class:`slice_st.errors.DataFormatError` (a ``ValueError``) naming the file and line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from slice_st.errors import DataFormatError

__all__ = [
    "PHRASE_TASKS",
    "PhrasePairs",
    "TurneyItems",
    "EntityMentions",
    "ParaphraseTasks",
    "read_bird",
    "read_turney",
    "read_ppdb",
    "read_conll_entities",
    "read_parabank_pi",
    "find_task_data",
]

#: Task name → files (relative to a data folder) tried in order; each also under ``pearl_eval/`` or ``nugget_pi/``.
PHRASE_TASKS: dict[str, tuple[str, ...]] = {
    "bird": ("bird/bird.txt",),
    "turney": ("turney/turney.txt",),
    "ppdb": ("ppdb/ppdb.json",),
    "ppdb-filtered": ("ppdb/ppdb_filtered.json",),
    "conll03": ("conll2003/test.json", "conll2003/all_data_small.json"),
    "parabank-pi": ("paraphrase_identification/{split}", "{split}"),
}
_PREFIXES = ("", "pearl_eval/", "nugget_pi/")
CONLL_TYPES = ("PER", "LOC", "ORG")


@dataclass
class PhrasePairs:
    """Phrase pairs with a gold value each: BIRD relatedness (0-1) or PPDB paraphrase label (1/0)."""

    phrase1: list[str]
    phrase2: list[str]
    labels: list[float]
    source: str = ""

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class TurneyItems:
    """Turney items: a bigram and its candidate unigrams, the correct one first."""

    queries: list[str]
    candidates: list[list[str]]
    source: str = ""

    def __len__(self) -> int:
        return len(self.queries)


@dataclass
class EntityMentions:
    """Entity mentions (phrases) and their types, for clustering."""

    phrases: list[str]
    labels: list[str]
    source: str = ""

    def __len__(self) -> int:
        return len(self.phrases)


@dataclass
class ParaphraseTasks:
    """Document paraphrase identification: for each source document, candidates and the answer's position."""

    documents: dict[str, str]
    sources: list[str]
    candidates: list[list[str]]
    answers: list[int]
    source: str = ""
    lines: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sources)


# ----------------------------------------------------------------------------------------- helpers
def _read_text(path: str | os.PathLike) -> tuple[str, str]:
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(f"data file not found: {name}")
    if os.path.isdir(name):
        raise IsADirectoryError(f"expected a data file, got a directory: {name}")
    with open(name, "rb") as handle:
        raw = handle.read()
    try:
        return raw.decode("utf-8-sig"), name
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataFormatError(
            f"{name}, line {line}: not UTF-8 text (byte {raw[error.start]:#04x})."
        ) from None


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        yield number, line.rstrip("\r\n")


def _phrase(value, name: str, line: int, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataFormatError(
            f"{name}, line {line}: {what} is empty or not a string: {value!r:.60}."
        )
    return value.strip()


def _json_array(text: str, name: str) -> Iterator[tuple[int, object]]:
    """Items of a JSON array with the line each starts on (parsed item by item, so errors name a line)."""
    decoder = json.JSONDecoder()
    position = len(text) - len(text.lstrip())
    if position >= len(text) or text[position] != "[":
        raise DataFormatError(
            f"{name}, line {text.count(chr(10), 0, position) + 1}: expected a JSON array ('[')."
        )
    position += 1
    line, counted = 1, 0
    expect_item = True
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position >= len(text):
            raise DataFormatError(f"{name}: the JSON array is not closed (no ']').")
        line += text.count("\n", counted, position)
        counted = position
        if text[position] == "]":
            return
        if not expect_item:
            if text[position] != ",":
                raise DataFormatError(
                    f"{name}, line {line}: expected ',' or ']' between array items."
                )
            position += 1
            expect_item = True
            continue
        try:
            item, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise DataFormatError(
                f"{name}, line {error.lineno}: invalid JSON ({error.msg})."
            ) from None
        yield line, item
        position, expect_item = end, False


# ------------------------------------------------------------------------------------------ PEARL
def read_bird(path: str | os.PathLike) -> PhrasePairs:
    """Read BIRD (bigram relatedness): ``term1``, ``term2`` and ``relatedness score`` of each row.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "bird.txt"
    >>> _ = path.write_text("pair\\tterm1\\tterm2\\tkind\\tsource\\trelation\\trelatedness score\\tpos\\n"
    ...                     "(red wine, claret)\\tred wine\\tclaret\\tunigram\\tX\\tNone\\t0.8\\tn-n\\n")
    >>> data = read_bird(path)
    >>> data.phrase1, data.phrase2, data.labels
    (['red wine'], ['claret'], [0.8])
    """
    text, name = _read_text(path)
    pairs = PhrasePairs([], [], [], name)
    header: list[str] | None = None
    for line, row in _lines(text):
        if not row.strip():
            continue
        fields = row.split("\t")
        if header is None:
            header = [cell.strip().lower() for cell in fields]
            needed = ("term1", "term2", "relatedness score")
            if any(column not in header for column in needed):
                raise DataFormatError(
                    f"{name}, line {line}: header {fields} lacks one of the columns {list(needed)} (tab-separated)."
                )
            columns = [header.index(column) for column in needed]
            continue
        if len(fields) != len(header):
            raise DataFormatError(
                f"{name}, line {line}: expected {len(header)} tab-separated fields, got {len(fields)}."
            )
        term1, term2, score = (fields[c] for c in columns)
        try:
            value = float(score)
        except ValueError:
            raise DataFormatError(
                f"{name}, line {line}: relatedness score {score!r} is not a number."
            ) from None
        if not math.isfinite(value):
            raise DataFormatError(
                f"{name}, line {line}: relatedness score {score!r} is not finite."
            )
        pairs.phrase1.append(_phrase(term1, name, line, "term1"))
        pairs.phrase2.append(_phrase(term2, name, line, "term2"))
        pairs.labels.append(value)
    if header is None:
        raise DataFormatError(f"{name}: the file is empty (no header row).")
    if not len(pairs):
        raise DataFormatError(f"{name}: no rows after the header.")
    return pairs


def read_turney(path: str | os.PathLike, *, keep_constituents: bool = False) -> TurneyItems:
    """Read Turney's bigram → unigram items: ``bigram | answer | word1 | word2 | distractor ...``.

    PEARL's protocol drops the bigram's own words (fields 3-4): 5 candidates, the answer first.
    ``keep_constituents=True`` keeps them as distractors (Turney's original 7-choice task).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "turney.txt"
    >>> _ = path.write_text("rain coat | raincoat | rain | coat | jacket | meadow\\n")
    >>> read_turney(path).candidates
    [['raincoat', 'jacket', 'meadow']]
    """
    text, name = _read_text(path)
    items = TurneyItems([], [], name)
    for line, row in _lines(text):
        if not row.strip():
            continue
        fields = [cell.strip() for cell in row.split("|")]
        if len(fields) < 5:
            raise DataFormatError(
                f"{name}, line {line}: expected 'bigram | answer | word1 | word2 | distractor ...' "
                f"(at least 5 '|'-separated fields), got {len(fields)}."
            )
        for position, value in enumerate(fields):
            _phrase(value, name, line, f"field {position + 1}")
        items.queries.append(fields[0])
        items.candidates.append([fields[1]] + (fields[2:] if keep_constituents else fields[4:]))
    if not items.queries:
        raise DataFormatError(f"{name}: no items.")
    return items


def read_ppdb(path: str | os.PathLike) -> PhrasePairs:
    """Read a PEARL PPDB file: a JSON array of ``[phrase1, phrase2, "pos" | "neg", (score)]`` (label 1/0).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "ppdb.json"
    >>> _ = path.write_text('[["very hard", "really difficult", "pos"], ["very hard", "been hard", "neg", null]]')
    >>> read_ppdb(path).labels
    [1.0, 0.0]
    """
    text, name = _read_text(path)
    pairs = PhrasePairs([], [], [], name)
    for line, item in _json_array(text, name):
        if not isinstance(item, list) or len(item) < 3:
            raise DataFormatError(
                f'{name}, line {line}: expected [phrase1, phrase2, "pos" | "neg", ...], got {item!r:.80}.'
            )
        label = item[2]
        if label not in ("pos", "neg"):
            raise DataFormatError(f"{name}, line {line}: label {label!r} is not 'pos' or 'neg'.")
        pairs.phrase1.append(_phrase(item[0], name, line, "phrase1"))
        pairs.phrase2.append(_phrase(item[1], name, line, "phrase2"))
        pairs.labels.append(1.0 if label == "pos" else 0.0)
    if len(set(pairs.labels)) < 2:
        raise DataFormatError(
            f"{name}: need both 'pos' and 'neg' pairs, got {len(pairs)} pair(s) of one label."
        )
    return pairs


def read_conll_entities(
    path: str | os.PathLike, *, types: Sequence[str] = CONLL_TYPES, first_sentence_only: bool = True
) -> EntityMentions:
    """Entity mentions of a CoNLL-03 JSON-lines file (PEARL's format), keeping entity ``types``.

    Like PEARL's evaluation, only the first sentence of each line is read (the files hold one) and
    MISC is left out. A mention is its tokens joined by spaces.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "conll.json"
    >>> _ = path.write_text('{"sentences": [["Anna", "Keller", "joins", "Nordbank"]], '
    ...                     '"ner": [[[0, 1, "PER"], [3, 3, "ORG"]]]}\\n')
    >>> data = read_conll_entities(path)
    >>> data.phrases, data.labels
    (['Anna Keller', 'Nordbank'], ['PER', 'ORG'])
    """
    text, name = _read_text(path)
    wanted = set(types)
    mentions = EntityMentions([], [], name)
    for line, row in _lines(text):
        if not row.strip():
            continue
        try:
            record = json.loads(row)
        except json.JSONDecodeError as error:
            raise DataFormatError(f"{name}, line {line}: invalid JSON ({error.msg}).") from None
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("sentences"), list)
            or not isinstance(record.get("ner"), list)
        ):
            raise DataFormatError(
                f"{name}, line {line}: expected an object with 'sentences' and 'ner' lists."
            )
        if len(record["sentences"]) != len(record["ner"]):
            raise DataFormatError(
                f"{name}, line {line}: {len(record['sentences'])} sentences but {len(record['ner'])} 'ner' lists."
            )
        pairs = list(zip(record["sentences"], record["ner"]))
        for tokens, entities in pairs[:1] if first_sentence_only else pairs:
            if (
                not isinstance(tokens, list)
                or not all(isinstance(t, str) for t in tokens)
                or not isinstance(entities, list)
            ):
                raise DataFormatError(
                    f"{name}, line {line}: a sentence must be a list of token strings with a list of entities."
                )
            for entity in entities:
                if (
                    not isinstance(entity, list)
                    or len(entity) != 3
                    or not all(isinstance(v, int) for v in entity[:2])
                    or not isinstance(entity[2], str)
                ):
                    raise DataFormatError(
                        f"{name}, line {line}: entity {entity!r:.60} is not [start, end, type]."
                    )
                start, end, kind = entity
                if not 0 <= start <= end < len(tokens):
                    raise DataFormatError(
                        f"{name}, line {line}: entity [{start}, {end}] is outside the sentence's {len(tokens)} tokens."
                    )
                if kind in wanted:
                    mentions.phrases.append(
                        _phrase(" ".join(tokens[start : end + 1]), name, line, "entity")
                    )
                    mentions.labels.append(kind)
    if len(set(mentions.labels)) < 2:
        raise DataFormatError(
            f"{name}: need entities of at least 2 of the types {sorted(wanted)}, found {sorted(set(mentions.labels))}."
        )
    return mentions


# ----------------------------------------------------------------------------------------- Nugget
def read_parabank_pi(folder: str | os.PathLike) -> ParaphraseTasks:
    """Read one split of Nugget's ParaBank paraphrase identification: ``docs.txt`` and ``task.jsonl``.

    Empty documents are kept as ``""`` (the released dev split has two: sources ``L873`` and ``L874``).

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "docs.txt").write_text("L0\\tA cat sat.\\nR0\\tThe cat was sitting.\\nR1\\tDogs bark.\\n")
    >>> _ = (folder / "task.jsonl").write_text('{"source": "L0", "candidates": ["R1", "R0"], "answer": 1}\\n')
    >>> tasks = read_parabank_pi(folder)
    >>> tasks.sources, tasks.candidates, tasks.answers
    (['L0'], [['R1', 'R0']], [1])
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"paraphrase identification folder not found: {folder} (expected docs.txt and task.jsonl in it)"
        )
    docs_text, docs_name = _read_text(os.path.join(folder, "docs.txt"))
    documents: dict[str, str] = {}
    for line, row in _lines(docs_text):
        if not row.strip():
            continue
        doc_id, tab, document = row.partition("\t")
        if not tab or not doc_id.strip():
            raise DataFormatError(f"{docs_name}, line {line}: expected 'id<TAB>document'.")
        if doc_id in documents:
            raise DataFormatError(f"{docs_name}, line {line}: duplicate document id {doc_id!r}.")
        documents[doc_id] = document.strip()
    task_text, task_name = _read_text(os.path.join(folder, "task.jsonl"))
    tasks = ParaphraseTasks(documents, [], [], [], task_name)
    for line, row in _lines(task_text):
        if not row.strip():
            continue
        try:
            record = json.loads(row)
        except json.JSONDecodeError as error:
            raise DataFormatError(
                f"{task_name}, line {line}: invalid JSON ({error.msg})."
            ) from None
        if not isinstance(record, dict) or not {"source", "candidates", "answer"} <= set(record):
            raise DataFormatError(
                f"{task_name}, line {line}: expected an object with 'source', 'candidates' and 'answer'."
            )
        source, candidates, answer = record["source"], record["candidates"], record["answer"]
        if not isinstance(candidates, list) or len(candidates) < 2:
            raise DataFormatError(
                f"{task_name}, line {line}: 'candidates' must be a list of at least 2 document ids."
            )
        if (
            isinstance(answer, bool)
            or not isinstance(answer, int)
            or not 0 <= answer < len(candidates)
        ):
            raise DataFormatError(
                f"{task_name}, line {line}: answer {answer!r} is not a position in the {len(candidates)} candidates."
            )
        for doc_id in [source, *candidates]:
            if doc_id not in documents:
                raise DataFormatError(
                    f"{task_name}, line {line}: document id {doc_id!r} is not in {docs_name}."
                )
        tasks.sources.append(source)
        tasks.candidates.append(list(candidates))
        tasks.answers.append(answer)
        tasks.lines.append(line)
    if not tasks.sources:
        raise DataFormatError(f"{task_name}: no tasks.")
    return tasks


def find_task_data(task: str, roots: Sequence[str | os.PathLike], split: str = "dev") -> str:
    """The file (or, for ``parabank-pi``, the split folder) of ``task`` under one of the ``roots``.

    Each root may be the task's own folder set (``…/pearl_eval``, ``…/nugget_pi``) or their parent.

    >>> find_task_data("bird", ["/nonexistent"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: no data for task 'bird' under /nonexistent (looked for bird/bird.txt, ...).
    """
    if task not in PHRASE_TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(PHRASE_TASKS)}.")
    tried = []
    for root in roots:
        for prefix in _PREFIXES:
            for relative in PHRASE_TASKS[task]:
                candidate = os.path.join(os.fspath(root), prefix + relative.format(split=split))
                tried.append(prefix + relative.format(split=split))
                if os.path.isfile(
                    os.path.join(candidate, "task.jsonl") if task == "parabank-pi" else candidate
                ):
                    return candidate
    where = ", ".join(os.fspath(root) for root in roots) or "(no --data folder)"
    looked = ", ".join(dict.fromkeys(tried))
    raise FileNotFoundError(f"no data for task {task!r} under {where} (looked for {looked}).")
