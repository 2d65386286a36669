"""Running ``slice-st serve``'s app with uvicorn: the address bound first, then the guarded connection handling."""

from __future__ import annotations

import logging
import socket

from slice_st._extras import needs_extra
from slice_st.index.span_index import SpanIndex
from slice_st.serve.app import LIMITS, ServeLimits, create_app
from slice_st.serve.guards import default_hosts, guarded_protocol, is_loopback, listening_socket
from slice_st.serve.source import IndexSource

logger = logging.getLogger(__name__)


def run_server(
    source: IndexSource | SpanIndex,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServeLimits = LIMITS,
    log_level: str = "info",
    *,
    allowed_hosts: list[str] | None = None,
    token: str | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve ``source`` with uvicorn on ``host:port`` until interrupted (options: those of
    :func:`~slice_st.serve.create_app`; ``allowed_hosts`` are answered besides ``host`` and ``localhost``; ``sock``:
    a socket already bound, :func:`listening_socket`). A non-loopback ``host`` without a ``token`` logs a warning.
    """
    with needs_extra("serve", "slice-st serve"):
        import uvicorn
    sock = sock if sock is not None else listening_socket(host, port)
    if not is_loopback(host) and token is None:
        logger.warning(
            "serving on %s with no token: anyone who can reach it can read the corpus (pass token=, or to slice-st "
            "serve --token or $SLICE_ST_TOKEN; or bind 127.0.0.1)",
            host,
        )
    app = create_app(
        source, limits, allowed_hosts=default_hosts(host) + list(allowed_hosts or []), token=token
    )
    config = uvicorn.Config(
        app,
        log_level=log_level,
        http=guarded_protocol(
            limits.request_timeout_s, limits.max_connections, limits.max_client_connections
        ),
        timeout_keep_alive=max(1, int(limits.request_timeout_s)),
        limit_concurrency=limits.max_connections,
        ws="none",
        lifespan="off",
    )
    uvicorn.Server(config).run(sockets=[sock])
