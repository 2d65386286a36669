"""Data readers and builders: STS-B-Context and STS-B (``stsb``), training triplets (``triplets``),
distillation passages (``passages``) and index corpora (``corpus``).

``slice_st.data`` itself keeps the names of the STS-B(-Context) module, as before the package layout.
"""

from slice_st.data.stsb import *  # noqa: F403
from slice_st.data.stsb import __all__  # noqa: F401
