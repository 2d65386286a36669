"""Integrations with other tools: the STS-B-Context task for mteb (``slice_st.integrations.mteb``, not imported
here: mteb takes seconds to import)."""
