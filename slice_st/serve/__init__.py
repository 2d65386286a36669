"""``slice-st serve``: a corpus index behind a JSON API and a search page (the extra ``slice-st[serve]``).

    from slice_st.serve import create_app, IndexSource
    app = create_app(IndexSource.from_directory("runs/corpus-index"))   # an ASGI app (FastAPI)

A directory index is re-opened when another process saves it. Only the CLI imports this package; without FastAPI,
importing it is a :class:`~slice_st.errors.MissingExtraError`.
"""

from slice_st.serve.app import LIMITS, SearchRequest, ServeLimits, create_app, router
from slice_st.serve.guards import listening_socket
from slice_st.serve.server import run_server
from slice_st.serve.source import IndexSource

__all__ = [
    "LIMITS",
    "IndexSource",
    "SearchRequest",
    "ServeLimits",
    "create_app",
    "listening_socket",
    "router",
    "run_server",
]
