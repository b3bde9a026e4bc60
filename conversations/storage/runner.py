"""Run storage functions off the event loop, on the agent's own threads, with bounded retry.

Django's ``database_sync_to_async`` shares one thread with every sync view under ASGI, so a slow
admin page would delay acks and commits (DESIGN §2). Storage calls of the agent and the chat
consumer run here instead. Transient DB errors are retried after 100/200/300 ms (seed 004 §4.4,
``PICOBOT_STORAGE_RETRY_DELAYS_MS``); the last error is re-raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    connection,
    connections,
)

from providers.redaction import redact

log = logging.getLogger(__name__)
T = TypeVar("T")

_executor: ThreadPoolExecutor | None = None


def _get_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        sqlite = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")
        # SQLite has one writer anyway; PostgreSQL gets a few threads (and connections).
        workers = 1 if sqlite else settings.PICOBOT.storage_threads
        _executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="picobot-storage")
    return _executor


def _call(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    # Each storage thread keeps its connection from call to call: opening one per call (what
    # CONN_MAX_AGE=0 does through close_old_connections) was 6 % of a busy process's CPU. A
    # connection that broke is closed on the error, and run_storage's retry opens a new one.
    try:
        return fn(*args, **kwargs)
    except DatabaseError:
        close_if_broken()
        raise


def close_if_broken() -> None:
    """Close this thread's connection if it broke, so that the next call opens a new one: for a
    storage function that catches a ``DatabaseError`` itself and goes on."""
    if connection.connection is not None and not connection.is_usable():
        connection.close()


async def run_storage(fn: Callable[..., T], *args: Any, retry: bool = True, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on a storage thread; retry transient DB errors.

    Only transient errors (``OperationalError``: lock timeouts, lost connections;
    ``InterfaceError``) are retried: an IntegrityError, a DataError (a value the column refuses) or
    our own ``StorageError``s are answers, not glitches, and would fail the same way again. Raises
    the last exception when every attempt failed.
    """
    delays = list(settings.PICOBOT.storage_retry_delays_ms) if retry else []
    runner = sync_to_async(_call, thread_sensitive=False, executor=_get_executor())
    attempt = 0
    while True:
        try:
            return await runner(fn, args, kwargs)
        except (OperationalError, InterfaceError) as exc:
            if attempt >= len(delays):
                log.error(
                    "storage call %s failed after %d attempts: %s", fn.__name__, attempt + 1, redact(str(exc))
                )
                raise
            log.warning(
                "storage call %s failed (%s); retrying in %d ms",
                fn.__name__,
                redact(str(exc)),
                delays[attempt],
            )
            await asyncio.sleep(delays[attempt] / 1000)
            attempt += 1


def shutdown_storage_threads(timeout: float = 10.0) -> None:
    """Close every storage thread's DB connection, then stop the threads (tests, process exit).

    Each thread holds its own connection; PostgreSQL will not drop a database (a test database,
    say) while they are open. One close task per thread, held at a barrier so that no thread
    runs two of them.
    """
    global _executor
    executor, _executor = _executor, None
    if executor is None:
        return
    workers = executor._max_workers
    barrier = threading.Barrier(workers)

    def close_here() -> None:
        # A broken barrier (a thread stuck elsewhere): this one closes its own all the same.
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout)
        connections.close_all()

    for _ in range(workers):
        executor.submit(close_here)
    executor.shutdown(wait=True)
