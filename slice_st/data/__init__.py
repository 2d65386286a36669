"""Data readers and builders: STS-B-Context and STS-B (``stsb``), training triplets (``triplets``),
distillation passages (``passages``) and index corpora (``corpus``)."""

from slice_st.data.stsb import make_context, read_stsb, read_stsb_context, write_stsb_context

__all__ = [
    "read_stsb_context",
    "write_stsb_context",
    "read_stsb",
    "make_context",
]
