"""``slice-st serve``: a corpus index behind a JSON API and a search page, ``create_app(IndexSource(...))`` (an ASGI
app); without the extra ``slice-st[serve]``, importing it is a :class:`~slice_st.errors.MissingExtraError`."""

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
