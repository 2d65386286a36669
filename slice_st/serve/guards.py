"""What keeps ``slice-st serve`` answering only its user, and at all: a body limit counted as read, a token gate, one
search at a time (never queued, stopped past its timeout), idle connections closed, the address bound first."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import re
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse

from slice_st.errors import SpanInputError

#: The cookie the page keeps the token in (``HttpOnly``, ``SameSite=Strict``).
TOKEN_COOKIE = "slice_st_token"


class BodyLimit:
    """ASGI middleware: read a request body up to ``max_bytes`` (counting the bytes received, chunked or not) within
    ``timeout_s``, then hand it to the app; past the limit, 413, past the time (a body that stalls), 408, each with
    the connection closed, whatever ``Content-Length`` claimed."""

    def __init__(self, app, max_bytes: int, timeout_s: float = 10.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                detail = f"the request body did not arrive within {self.timeout_s:g} s."
                response = JSONResponse({"detail": detail}, 408, {"connection": "close"})
                await response(scope, receive, send)
                return
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                detail = f"request body over {self.max_bytes} bytes."
                response = JSONResponse({"detail": detail}, 413, {"connection": "close"})
                await response(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        whole = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay():
            return whole.pop() if whole else await receive()

        await self.app(scope, replay, send)


class TokenGate:
    """ASGI middleware: with ``token`` set, a request needs ``Authorization: Bearer TOKEN`` or the page's cookie
    (401 otherwise). ``GET /?token=TOKEN`` sets that cookie and sends the browser on to ``/``."""

    def __init__(self, app, token: str | None) -> None:
        self.app = app
        self.token = token.encode() if token else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.token is None:
            await self.app(scope, receive, send)
            return
        sent, in_query = _offered_tokens(scope)
        if any(hmac.compare_digest(candidate, self.token) for candidate in sent):
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/" and any(
            hmac.compare_digest(candidate, self.token) for candidate in in_query
        ):
            # a space, ';' or 'é' in a cookie: percent-encoded
            value = quote(self.token.decode(), safe="")
            cookie = f"{TOKEN_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/"
            await RedirectResponse("/", 303, {"set-cookie": cookie})(scope, receive, send)
            return
        detail = "this server needs its token: open /?token=TOKEN once, or send Authorization: Bearer TOKEN."
        await JSONResponse({"detail": detail}, 401)(scope, receive, send)


def check_token(token: str | None) -> None:
    """Refuse an empty or blank ``token`` (``SpanInputError``): it is not "open" (``None``: no token)."""
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise SpanInputError(f"token must be a non-empty secret (None: no token), got {token!r}.")


def _offered_tokens(scope) -> tuple[list[bytes], list[bytes]]:
    """The tokens a request carries in its ``Authorization: Bearer`` header or cookie, and in its query string (the
    cookie and the query percent-decoded, as a browser encodes them)."""
    sent, cookie = [], TOKEN_COOKIE.encode() + b"="
    for name, value in scope.get("headers", []):
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            sent.append(value[7:].strip())
        elif name == b"cookie":
            parts = [part.strip() for part in value.split(b";")]
            sent += [
                unquote_to_bytes(part[len(cookie) :]) for part in parts if part.startswith(cookie)
            ]
    query = scope.get("query_string", b"").split(b"&")
    return sent, [
        unquote_to_bytes(part[6:].replace(b"+", b" "))
        for part in query
        if part.startswith(b"token=")
    ]


class HideToken(logging.Filter):
    """Shows ``token=…`` in a logged request line as ``token=***`` (uvicorn's access log prints the query string)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                re.sub(r"([?&]token=)[^&#\s]*", r"\1***", item) if isinstance(item, str) else item
                for item in record.args
            )
        return True


class SearchBusy(RuntimeError):
    """Another search holds the model (answered 503 at once)."""


class SearchRunner:
    """Runs one search at a time in a worker thread (the tokenizer is not thread-safe): a second is refused at once
    (:class:`SearchBusy`); one past its timeout stops at its next query chunk (``TimeoutError``)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def run(self, work: Callable[[threading.Event], Any]) -> Any:
        """``work(cancelled)`` in a thread under the lock; raises :class:`SearchBusy` or ``TimeoutError``."""
        if not self._lock.acquire(blocking=False):
            raise SearchBusy("another search is running")
        cancelled = threading.Event()

        def locked() -> Any:
            try:
                return work(cancelled)
            finally:
                self._lock.release()

        try:
            return await asyncio.wait_for(run_in_threadpool(locked), timeout=self.timeout_s)
        except BaseException:
            cancelled.set()  # the thread stops at its next chunk and gives the lock back
            raise


def guarded_protocol(
    request_timeout_s: float, max_connections: int, max_client_connections: int | None = None
):
    """uvicorn's h11 protocol, closing a connection that sends no complete request head within ``request_timeout_s``
    and refusing (closing at once) connections past ``max_connections``, or past ``max_client_connections`` from one
    address (so one client cannot hold them all)."""
    per_client = max_client_connections or max_connections
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            if not any(isinstance(item, HideToken) for item in self.access_logger.filters):
                self.access_logger.addFilter(HideToken())

        def connection_made(self, transport) -> None:
            address = (transport.get_extra_info("peername") or ("",))[0]
            same = sum(
                1 for other in self.connections if other.client and other.client[0] == address
            )
            # no file handle is held for it
            if len(self.connections) >= max_connections or same >= per_client:
                transport.close()
                return
            super().connection_made(transport)
            self.loop.call_later(request_timeout_s, self._close_if_silent)

        def _close_if_silent(self) -> None:
            if self.cycle is None and not self.transport.is_closing():  # not one request head yet
                self.transport.close()

        def connection_lost(self, exc) -> None:
            if self in self.connections:
                super().connection_lost(exc)

    return GuardedH11Protocol


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address of this machine only (``127.0.0.0/8``, ``::1``, ``localhost``).

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0"), is_loopback("192.168.1.4")
    (True, True, False, False)
    """
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_hosts(host: str) -> list[str]:
    """The ``Host`` names a server bound to ``host`` answers (any other, e.g. a DNS-rebinding page, is refused); an
    IPv6 address as a browser sends it, in brackets.

    >>> default_hosts("127.0.0.1"), default_hosts("0.0.0.0"), default_hosts("::1")
    (['127.0.0.1', 'localhost'], ['localhost', '127.0.0.1', '[::1]'], ['[::1]', 'localhost'])
    """
    wildcard = host in ("0.0.0.0", "::", "")
    return host_names(["localhost", "127.0.0.1", "::1"] if wildcard else [host, "localhost"])


def host_names(hosts: list[str]) -> list[str]:
    """``hosts`` as a ``Host`` header names them: an IPv6 address in brackets (``::1`` → ``[::1]``)."""
    return [f"[{host}]" if _is_ipv6(host) else host for host in hosts]


def _is_ipv6(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        return False


def server_url(host: str, port: int) -> str:
    """The address a browser opens: ``http://[::1]:8000/`` for an IPv6 address.

    >>> server_url("::1", 8905), server_url("127.0.0.1", 80)
    ('http://[::1]:8905/', 'http://127.0.0.1:80/')
    """
    return f"http://{host_names([host])[0]}:{port}/"


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening; a bad port, a name that does not resolve or an address in use
    is a ``ValueError`` saying so (checked before the model loads)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise SpanInputError(
            f"port must be a number from 0 (any free port) to 65535, got {port!r}."
        )
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as error:
        raise SpanInputError(
            f"cannot listen on {host}: the name does not resolve ({error})."
        ) from None
    family, kind, protocol, _, address = infos[0]
    sock = socket.socket(family, kind, protocol)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise SpanInputError(
            f"cannot listen on {host}:{port}: {error.strerror or error}."
        ) from None
    sock.setblocking(False)
    return sock
