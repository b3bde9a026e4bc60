"""A stdio MCP server's stderr: logged line by line, its last lines kept for the status (issue 18).

A server that dies at start says why on stderr ("ModuleNotFoundError: …"); the SDK only sees
"Connection closed". :class:`StderrTail` is the server's ``errlog``: a pipe whose reader logs
each line (``MCP server NAME: …``, redacted) and keeps the last ``MAX_LINES`` for the failure's
``last_error``. Bounded: lines longer than ``MAX_LINE_CHARS`` are cut, nothing else is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque

from conversations.agent.log_safety import log_safe

log = logging.getLogger("conversations.tools.mcp.connection")

MAX_LINES = 5
MAX_LINE_CHARS = 200
READ_BYTES = 4096


class StderrTail:
    """A pipe for one server process's stderr (``file`` is what the SDK's ``errlog`` takes).

    ``level``: of its log lines (a server restarted after a failure logs at DEBUG: a crash loop
    would repeat the same lines every backoff; its failure line quotes the last ones). Call
    :meth:`spawned` once the process runs (the parent's copy of the write end closes, so the
    reader sees end-of-file when the server exits), :meth:`text` for its last lines, and
    :meth:`close` when the connection ends.
    """

    def __init__(self, server_name: str, level: int = logging.INFO) -> None:
        self.server_name = server_name
        self.level = level
        self.lines: deque[str] = deque(maxlen=MAX_LINES)
        read_fd, write_fd = os.pipe()
        self.file = os.fdopen(write_fd, "w")
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._task = asyncio.ensure_future(self._pump())

    def spawned(self) -> None:
        """The child holds its own copy of the write end now: drop the parent's."""
        with contextlib.suppress(OSError):
            self.file.close()

    async def text(self, wait: float = 1.0) -> str:
        """The last lines, `` | ``-joined ("" when it wrote nothing). Waits up to ``wait`` s for
        the server's end-of-file first (a process that just died may not be read to its end)."""
        if not self._task.done():
            await asyncio.wait([self._task], timeout=wait)
        return " | ".join(self.lines)

    async def close(self) -> None:
        self.spawned()
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self._reader
        )
        pending = b""
        try:
            while chunk := await reader.read(READ_BYTES):
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) > MAX_LINE_CHARS * 4:  # one endless line: keep its start
                    lines.append(pending)
                    pending = b""
                for line in lines:
                    self._keep(line)
            if pending:
                self._keep(pending)
        finally:
            transport.close()

    def _keep(self, raw: bytes) -> None:
        line = raw.decode(errors="replace").rstrip()
        if not line:
            return
        text = log_safe(line, MAX_LINE_CHARS)
        self.lines.append(text)
        log.log(self.level, "MCP server %s: %s", self.server_name, text)
