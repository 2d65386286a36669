"""Integrations with other tools: the STS-B-Context task for mteb (``slice_st.integrations.mteb``).

Nothing is imported here: mteb takes seconds to import.
"""
