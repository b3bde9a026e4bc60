"""The Feishu long connection: the official SDK's WebSocket client (``lark_oapi.ws.Client`` 1.7.5) in
a thread of its own, handing each event's JSON bytes to the main loop (FEISHU.md §5).

Why a thread with its own loop: the SDK captures a module-level loop when ``lark_oapi`` is first
imported, ``Client.start()`` blocks its thread forever in ``loop.run_until_complete``, and there is no
``stop()``. Under Daphne's running loop it fails with "This event loop is already running" (upstream
issues #96, #133); clients in several threads overwrite each other's loop (#119), so one
:class:`LongConnection` per process. The SDK's own ``FeishuChannel`` runs ``start()`` in a thread too.

The SDK calls the handler synchronously inside its loop and acks the frame when it returns:
``{"code": 200}``, or ``{"code": 500}`` if it raised, and the platform delivers the event again. So
the handler waits at most ``handoff_timeout`` s for ``on_event`` on the main loop and raises when that
failed or timed out (the platform allows 3 s; a blocked handler also stalls the connection's pings).

SDK internals relied on (1.7.5 has no way to stop): the module global ``lark_oapi.ws.client.loop``
(every SDK coroutine looks it up there), ``Client._conn`` (the websocket), ``Client._auto_reconnect``
and the handler method the client calls, ``_do_without_validation`` (``do_without_validation``, its
deprecated public name, is provided too). Stopping cancels the loop's tasks so that ``start()``
raises ``CancelledError``; stopping the loop instead would send ``start()`` into its reconnect path,
and ``Client._disconnect()`` releases its lock even when acquiring it was cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["LongConnection"]

log = logging.getLogger(__name__)

RETRY_FIRST_SECONDS = 5.0
RETRY_MAX_SECONDS = 60.0
# A ClientException while the SDK reconnects (e.g. 1000040350, too many connections) ends its
# receive task for good while start() keeps blocking: a connection down this long is started anew.
DOWN_RESTART_SECONDS = 600.0
CLOSE_SECONDS = 1.0


class _EventHandOff:
    """The SDK's event handler (duck-typed ``EventDispatcherHandler``): runs ``on_event(payload)`` on
    the main loop and waits for it. Returns None (a result would go into the ack); raises what
    ``on_event`` raised, or ``TimeoutError`` after ``timeout`` seconds (``on_event`` is cancelled)."""

    def __init__(
        self, on_event: Callable[[bytes], Awaitable[None]], loop: asyncio.AbstractEventLoop, timeout: float
    ):
        self._on_event, self._loop, self._timeout = on_event, loop, timeout

    async def _call(self, payload: bytes) -> None:
        await self._on_event(payload)

    def _do_without_validation(self, payload: bytes) -> None:
        coro = self._call(payload)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError:  # the main loop is closed (shutting down): let the platform redeliver
            coro.close()
            raise
        try:
            future.result(timeout=self._timeout)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"on_event did not finish within {self._timeout} s") from None
        except Exception:
            log.warning("feishu event handler failed (acked 500: redelivered)", exc_info=True)
            raise

    do_without_validation = _do_without_validation


class LongConnection:
    """The SDK client for one app, run by :meth:`start` in a daemon thread until :meth:`stop`.

    Args:
        domain: the Open API base (``https://open.feishu.cn``): the SDK POSTs
            ``{domain}/callback/ws/endpoint`` for its websocket URL.
        on_event: awaited on ``loop`` with each event's raw JSON bytes; raising means "not recorded,
            deliver it again".
        handoff_timeout: seconds the SDK thread waits for ``on_event`` before acking 500.
    """

    def __init__(
        self,
        app_id: str,
        app_secret: str,
        *,
        domain: str,
        on_event: Callable[[bytes], Awaitable[None]],
        loop: asyncio.AbstractEventLoop,
        handoff_timeout: float = 2.0,
    ) -> None:
        self._app_id, self._app_secret, self._domain = app_id, app_secret, domain
        self._handler = _EventHandOff(on_event, loop, handoff_timeout)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the thread's
        self._client: Any = None
        self._in_start = False  # used on the thread only

    @property
    def connected(self) -> bool:
        """Whether the websocket is open right now (for logs and health checks)."""
        return self._client is not None and self._client._conn is not None

    @property
    def running(self) -> bool:
        """Whether the thread is alive (from :meth:`start` until :meth:`stop` ended it)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Starts the thread and returns at once (connecting and retrying happen there); once only."""
        if self._thread is not None:
            raise RuntimeError("LongConnection.start() called twice")
        self._thread = threading.Thread(target=self._run, name="feishu-long-connection", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Closes the connection and ends the thread, waiting at most ``timeout`` seconds (blocking:
        run it via ``asyncio.to_thread``). Never raises; logs a warning if the thread outlives the
        wait (e.g. stuck in the SDK's endpoint POST, which has no timeout of its own)."""
        self._stopping.set()
        client, loop, thread = self._client, self._loop, self._thread
        if client is not None:
            client._auto_reconnect = False
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the thread has ended
                loop.call_soon_threadsafe(self._interrupt_start)
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("feishu long connection thread still running %.1f s after stop", timeout)

    def _interrupt_start(self) -> None:
        """On the thread's loop: makes ``client.start()`` raise (a no-op during our own clean-up)."""
        if self._in_start:
            current = asyncio.current_task()
            for task in asyncio.all_tasks():
                if task is not current:
                    task.cancel()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            import lark_oapi
            from lark_oapi.core.log import logger as sdk_logger
            from lark_oapi.ws import client as ws_client

            # The SDK prints through its own stdout handler as well: once is enough (ours).
            sdk_logger.handlers.clear()

            ws_client.loop = loop
            delay = RETRY_FIRST_SECONDS
            while not self._stopping.is_set():
                client = lark_oapi.ws.Client(
                    self._app_id,
                    self._app_secret,
                    log_level=lark_oapi.LogLevel.WARNING,  # INFO logs the websocket URL with its ticket
                    event_handler=self._handler,
                    domain=self._domain,
                    auto_reconnect=True,
                )
                self._client = client
                if self._stopping.is_set():  # stop() may have seen the previous client only
                    break
                started, error = time.monotonic(), None
                loop.create_task(self._restart_when_down(client))
                self._in_start = True
                try:
                    client.start()  # returns never; raises when it cannot connect or was interrupted
                except BaseException as exc:  # the thread must not die
                    error = exc
                finally:
                    self._in_start = False
                    self._close(loop, client)
                if self._stopping.is_set():
                    break
                if time.monotonic() - started > RETRY_MAX_SECONDS:  # it ran a while: back to short delays
                    delay = RETRY_FIRST_SECONDS
                reason = f"{type(error).__name__}: {error}"
                reason = reason.replace(self._app_secret, "***") if self._app_secret else reason
                log.warning("feishu long connection failed, retrying in %g s: %s", delay, reason)
                if self._stopping.wait(delay):
                    break
                delay = min(delay * 2, RETRY_MAX_SECONDS)
        except BaseException:  # pragma: no cover - e.g. the SDK is not installed
            log.exception("feishu long connection thread ended")
        finally:
            loop.close()

    async def _restart_when_down(self, client: Any) -> None:
        down_since = time.monotonic()
        while True:
            await asyncio.sleep(min(30.0, DOWN_RESTART_SECONDS))
            if client._conn is not None:
                down_since = time.monotonic()
            elif time.monotonic() - down_since > DOWN_RESTART_SECONDS:
                log.warning(
                    "feishu long connection down for %.0f s: restarting the client", DOWN_RESTART_SECONDS
                )
                self._interrupt_start()
                return

    @staticmethod
    def _close(loop: asyncio.AbstractEventLoop, client: Any) -> None:
        """Cancels the SDK's tasks (receiving, pinging, reconnecting), then closes its websocket."""
        client._auto_reconnect = False
        conn, tasks = client._conn, asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        try:
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=CLOSE_SECONDS))
            if conn is not None:
                loop.run_until_complete(asyncio.wait_for(conn.close(), CLOSE_SECONDS))
        except Exception as exc:  # best effort: the socket is aborted instead
            log.debug("feishu long connection close: %r", exc)
            if conn is not None and conn.transport is not None:
                conn.transport.abort()
        client._conn = None
