"""Free loopback ports for the servers tests start themselves (DESIGN §10: never the shared ones)."""

from __future__ import annotations

import socket


def free_port_in(ports: range) -> int:
    """The first port of ``ports`` that 127.0.0.1 can bind now.

    Raises:
        RuntimeError: every port of ``ports`` is taken.
    """
    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")
