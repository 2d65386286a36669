"""The Ray connection shared by the Ray build (:mod:`slice_st.index.ray_engine`) and the Ray search
(:class:`~slice_st.index.RayShardedSpanIndex`): the address, the connection, the workers claimed, the workers' errors
told as the user's."""

from __future__ import annotations

import builtins
import gc
import logging
import os
import re
import socket
import time
import urllib.parse

from slice_st import errors
from slice_st._extras import needs_extra
from slice_st.errors import MissingExtraError, RayClusterError, SpanInputError

#: Errors of a worker that are the user's to fix (bad input).
USER_ERRORS = (ValueError, OSError, MissingExtraError)


def require_ray(feature: str = "Ray (engine='ray', --ray)"):
    """``ray`` with Ray Data, or a :class:`~slice_st.errors.MissingExtraError` naming ``slice-st[ray]``."""
    with needs_extra("ray", feature):
        import ray
        import ray.data  # noqa: F401  (Ray Data: ray[data])
    return ray


def check_address(address: str | None) -> str | None:
    """A Ray address as ``ray.init`` takes it: ``None`` (``"local"``: start Ray here), ``"auto"``, ``HOST:PORT`` or
    ``ray://HOST:PORT``.

    >>> check_address("local"), check_address("ray://head:10001")
    (None, 'ray://head:10001')
    """
    if address is None or address == "local":
        return None
    if not isinstance(address, str) or not re.fullmatch(
        r"(auto|ray://[\w.-]+:\d+|[\w.-]+:\d+)", address
    ):
        raise SpanInputError(
            f"{address!r} is not a Ray address: give auto, HOST:PORT or ray://HOST:PORT (or none: Ray starts here)."
        )
    return address


def probe_address(address: str | None, timeout: float = 10.0) -> None:
    """A :class:`RayClusterError` at once if ``HOST:PORT`` (or ``ray://HOST:PORT``) does not answer within ``timeout``
    seconds, rather than a ``ray.init`` that never returns (``"auto"``: not probed)."""
    if address is None or address in ("auto", "local"):
        return
    parts = urllib.parse.urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or port is None:
        return  # not HOST:PORT: left to ray.init
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        why = (
            f"no answer within {timeout:g} s"
            if isinstance(error, TimeoutError)
            else (error.strerror or str(error))
        )
        raise RayClusterError(
            f"cannot connect to the Ray cluster at {address}: {why} (is Ray running there? `ray start --head`)."
        ) from None


def connect_ray(address: str | None = None) -> bool:
    """Connect to Ray at ``address`` unless it is initialised, or start it here; ``True`` if this call started it."""
    ray, address = require_ray(), check_address(address)
    if ray.is_initialized():
        return False
    probe_address(address or os.environ.get("RAY_ADDRESS"))
    try:
        # Ray's own warnings follow slice_st's logger (`--quiet` sets it to ERROR), never its INFO lines
        level = max(logging.WARNING, logging.getLogger("slice_st").getEffectiveLevel())
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=level)
    except (ConnectionError, TimeoutError, ValueError, RuntimeError) as error:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise RayClusterError(
            f"cannot connect to {where}: {' '.join(str(error).split())[:300]}"
        ) from None
    return True


def claim_workers(
    workers: int | None, limit: int, num_cpus: float, num_gpus: float = 0, timeout: float = 60.0
) -> int:
    """How many actors of ``num_cpus``/``num_gpus`` to start (``workers``, default: as many as fit, at most ``limit``),
    once that many are free (waiting up to ``timeout`` s); else a :class:`RayClusterError`, never an endless wait."""
    ray = require_ray()
    total = ray.cluster_resources()

    def room(resources: dict[str, float]) -> int:
        cpus = int(resources.get("CPU", 0) // num_cpus)
        return min(cpus, int(resources.get("GPU", 0) // num_gpus)) if num_gpus else cpus

    size = f"{total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs"
    worker = f"{num_cpus:g} CPU and {num_gpus:g} GPU"
    if room(total) < 1:
        raise RayClusterError(f"the Ray cluster ({size}) has no room for one worker of {worker}.")
    wanted = min(workers or room(total), limit)
    if wanted > room(total):
        raise RayClusterError(
            f"{wanted} workers of {worker} do not fit the Ray cluster ({size}): ask for at most {room(total)}."
        )
    deadline = time.monotonic() + timeout
    while room(ray.available_resources()) < wanted:
        gc.collect()  # Ray Data frees a finished dataset's actors only when the dataset is collected
        if time.monotonic() > deadline:
            raise RayClusterError(
                f"{wanted} workers of {worker}: the Ray cluster ({size}) has not had them free for {timeout:g} s "
                "(other jobs hold them); ask for fewer, or try again."
            )
        time.sleep(0.2)
    return wanted


def user_error(error: BaseException) -> BaseException:
    """A Ray worker's error as the driver says it: a ValueError/OSError among its causes (one line), else ``error``."""
    seen, todo = set(), [error]
    while todo:
        cause = todo.pop(0)
        if cause is None or id(cause) in seen:
            continue
        seen.add(id(cause))
        own = not type(cause).__module__.startswith("ray.")
        if own and isinstance(cause, (ValueError, OSError)):
            if isinstance(cause, SpanInputError):
                return SpanInputError(str(cause))
            text = str(cause).strip()
            return SpanInputError(text.splitlines()[-1] if text else type(cause).__name__)
        todo += [getattr(cause, "cause", None), cause.__cause__, cause.__context__]
    # Ray may hand back only the worker's traceback as text: its own error is the line "module.Error: message"
    for name, message in re.findall(
        r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", str(error), flags=re.MULTILINE
    ):
        short = name.rpartition(".")[2]
        kind = getattr(builtins, short, None) or getattr(errors, short, None)
        if not name.startswith("ray.") and isinstance(kind, type) and issubclass(kind, USER_ERRORS):
            return SpanInputError(message.strip())
    return error
