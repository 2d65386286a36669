"""Data readers: STS-B-Context and STS-B (``stsb``), training triplets (``triplets``), distillation passages
(``passages``) and index corpora (``corpus``)."""

from slice_st.data.stsb import read_stsb, read_stsb_context

__all__ = ["read_stsb_context", "read_stsb"]
