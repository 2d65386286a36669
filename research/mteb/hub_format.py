"""The released STS-B-Context TSV in mteb's STS columns (``sentence1``, ``sentence2``, ``score``), split ``test``:
what goes to the Hub for the upstream task (``tasks/sts/eng/stsb_context_sts.py``).

    python research/mteb/hub_format.py stsb-context.tsv OUT_FOLDER     # then: datasets.load_from_disk(OUT_FOLDER)
"""

from __future__ import annotations

import sys


def to_mteb_columns(path):
    """A ``DatasetDict`` with one split, ``test``: ``sentence1`` (the origin phrase, ``line``), ``sentence2`` (the
    passage) and ``score`` (``goldsim``, 0-5), read and checked by slice-st's reader."""
    import datasets

    from slice_st.data import read_stsb_context

    data = read_stsb_context(path)
    return datasets.DatasetDict(
        {
            "test": datasets.Dataset.from_dict(
                {"sentence1": data["line"], "sentence2": data["passage"], "score": data["goldsim"]}
            )
        }
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    to_mteb_columns(sys.argv[1]).save_to_disk(sys.argv[2])
