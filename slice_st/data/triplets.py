"""SLICE training triplets ``(anchor, positive, negative)``: a query, a passage holding a span similar to it and a
passage without one, from a TSV as MS MARCO's. The paper's offline builders are in ``research/``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from slice_st._extras import needs_extra
from slice_st.errors import DataFormatError
from slice_st.files import file_lines

if TYPE_CHECKING:
    from datasets import Dataset


def read_msmarco_triples(path: str | os.PathLike) -> Dataset:
    """MS MARCO training triples from a TSV of ``query, positive passage, negative passage`` → ``Dataset``, mojibake
    (``donâ€™t``) repaired by ftfy. A row with the wrong number of columns or an empty field is a
    :class:`~slice_st.errors.DataFormatError` naming the file and line.
    """
    with needs_extra("train", "reading MS MARCO triples"):
        import datasets
        import ftfy

    columns: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    # not UTF-8, a folder, a device: one clear error
    for number, _, line in file_lines(os.fspath(path)):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise DataFormatError(f"{path}, line {number}: expected 3 fields, got {len(fields)}.")
        for name, value in zip(columns, map(ftfy.fix_text, fields)):
            if not value.strip():
                raise DataFormatError(f"{path}, line {number}: the {name} field is empty.")
            columns[name].append(value.strip())
    if not columns["anchor"]:
        raise DataFormatError(f"{path}: no triples found.")
    return datasets.Dataset.from_dict(columns)
