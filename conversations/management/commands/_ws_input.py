"""What ``manage.py serve``'s Daphne does with client WebSocket frames it cannot pass on (PROTOCOL §1).

autobahn, under Daphne, *drops the TCP connection* for every failure of the peer (its
``failByDrop`` default): a message over the payload limit ended the socket (the client saw 1006)
instead of the ``error`` frame PROTOCOL §1 promises, and invalid UTF-8 in a text frame was answered
with an abort — with the rest of the client's frame still unread, the kernel sends a TCP reset, so
the client never saw the 1007 the failure deserves. :func:`install_input_limit` changes both:

* A message whose payload exceeds ``max_message_bytes`` is **discarded as it streams in**: from the
  frame header that takes it over the limit on, its bytes are counted and dropped (never buffered,
  never UTF-8 checked: memory stays bounded whatever the declared length, e.g. a 100 MiB frame).
  When it has ended, the client gets ``{"type": "error", "code": "frame_too_large", "message": …,
  "ref": …}`` and the connection goes on; the application never sees the message.
* Any other failure of the peer (invalid UTF-8 → 1007, a protocol violation → 1002) is answered
  with a close frame and the closing handshake (autobahn's ``failByDrop=False``): the bytes still in
  flight are read and dropped until the client's close arrives (at most autobahn's close handshake
  timeout, 1 s), so the client reads the close code instead of a reset.

Import this module only after ``daphne.server`` (which installs Twisted's asyncio reactor).
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

log = logging.getLogger(__name__)

FRAME_TOO_LARGE = "frame_too_large"
"""The ``error`` frame's code for a discarded message (PROTOCOL §1), as the application's own."""


class InputLimitedWebSocketProtocol:
    """Mixin for Daphne's ``WebSocketProtocol``: discard a message over ``max_message_bytes`` while
    it arrives and answer it with an ``error`` frame (see module). Goes first in the bases."""

    max_message_bytes = 9 * 1024 * 1024
    _discarding = False
    _discarded_bytes = 0

    def onMessageBegin(self, isBinary: bool) -> None:  # noqa: N802, N803 - autobahn's names
        self._discarding = False
        self._discarded_bytes = 0
        super().onMessageBegin(isBinary)

    def onMessageFrameBegin(self, length: int) -> None:  # noqa: N802 - autobahn's name
        if not self._discarding and self.message_data_total_length + length > self.max_message_bytes:
            self._discarding = True
            self._discarded_bytes = self.message_data_total_length
            self.message_data = []  # earlier frames of this message, if any: released now
            # The message is dropped whole: checking its UTF-8 would only cost CPU.
            self.utf8validateIncomingCurrentMessage = False
        if self._discarding:
            self.message_data_total_length += length
            self._discarded_bytes += length
            self.frame_data = None
            return
        super().onMessageFrameBegin(length)

    def onMessageFrameData(self, payload: bytes) -> None:  # noqa: N802 - autobahn's name
        if not self._discarding:
            super().onMessageFrameData(payload)

    def onMessageFrameEnd(self) -> None:  # noqa: N802 - autobahn's name
        if not self._discarding:
            super().onMessageFrameEnd()

    def onMessageEnd(self) -> None:  # noqa: N802 - autobahn's name
        if not self._discarding:
            super().onMessageEnd()
            return
        self._discarding = False
        self.message_data = []
        ref = secrets.token_hex(4)
        log.info(
            "WebSocket %s: a %d-byte message discarded (limit %d bytes, ref %s)",
            _peer(self),
            self._discarded_bytes,
            self.max_message_bytes,
            ref,
        )
        frame = {
            "type": "error",
            "code": FRAME_TOO_LARGE,
            "message": f"frame exceeds {self.max_message_bytes} bytes; it was discarded",
            "ref": ref,
        }
        if self.state == self.STATE_OPEN:
            self.serverSend(json.dumps(frame), False)


def _peer(protocol: Any) -> str:
    address = getattr(protocol, "client_addr", None)
    return f"{address[0]}:{address[1]}" if address else "?"


def install_input_limit(ws_factory: Any, max_message_bytes: int) -> None:
    """Make the WebSockets that ``ws_factory`` (Daphne's ``WebSocketFactory``) builds from now on
    discard messages over ``max_message_bytes`` with an ``error`` frame, and close (never drop)
    a connection whose peer fails (see module). Call it after any other change of
    ``ws_factory.protocol`` (it subclasses the protocol in place)."""
    ws_factory.setProtocolOptions(failByDrop=False)
    ws_factory.protocol = type(
        "InputLimitedWebSocketProtocol",
        (InputLimitedWebSocketProtocol, ws_factory.protocol),
        {"max_message_bytes": max_message_bytes},
    )
