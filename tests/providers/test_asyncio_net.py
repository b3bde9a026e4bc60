"""providers._asyncio_net: httpcore2's network backend on asyncio streams (the providers' client).

Real loopback sockets: plain HTTP and TLS (a self-signed certificate made with the ``openssl``
command), errors mapped to httpcore2's/httpx2's exceptions as the anyio backend maps them, and an
idle keep-alive connection that the server closed is not reused.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

import httpcore2
import httpx2
import pytest

from providers._asyncio_net import AsyncioNetworkBackend, use_asyncio_network


async def _http_server(handler_body: bytes = b"hello", *, close_after: bool = False, ssl_context=None):
    """A tiny HTTP/1.1 server answering every request with ``handler_body`` (keep-alive unless
    ``close_after``). Returns ``(server, port, served)``: ``served`` counts the connections."""
    served = {"connections": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served["connections"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                    + str(len(handler_body)).encode()
                    + b"\r\n\r\n"
                    + handler_body
                )
                await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ssl_context)
    return server, server.sockets[0].getsockname()[1], served


def _client(**kwargs) -> httpx2.AsyncClient:
    client = httpx2.AsyncClient(**kwargs)
    assert use_asyncio_network(client) == 1
    return client


async def test_requests_go_over_asyncio_streams_and_reuse_the_connection():
    server, port, served = await _http_server(b"x" * 100_000)
    async with server, _client() as client:
        for _ in range(3):
            response = await client.get(f"http://127.0.0.1:{port}/")
            assert response.status_code == 200 and response.content == b"x" * 100_000
    assert served["connections"] == 1, "keep-alive: one connection for three requests"


async def test_an_idle_connection_the_server_closed_is_not_reused():
    server, port, served = await _http_server(b"ok", close_after=True)
    async with server, _client() as client:
        assert (await client.get(f"http://127.0.0.1:{port}/")).content == b"ok"
        await asyncio.sleep(0.2)  # the server's FIN arrives on the idle connection
        assert (await client.get(f"http://127.0.0.1:{port}/")).content == b"ok"
    assert served["connections"] == 2


async def test_a_refused_connection_is_a_connect_error():
    sock_server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = sock_server.sockets[0].getsockname()[1]
    sock_server.close()
    await sock_server.wait_closed()
    async with _client() as client:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")


async def test_reads_and_connects_time_out_as_httpcore_timeouts():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        stream = await AsyncioNetworkBackend().connect_tcp("127.0.0.1", port, timeout=5)
        assert stream.get_extra_info("is_readable") is False
        assert stream.get_extra_info("server_addr")[1] == port
        with pytest.raises(httpcore2.ReadTimeout):
            await stream.read(1024, timeout=0.05)
        await stream.aclose()
        async with _client(timeout=httpx2.Timeout(5, read=0.05)) as client:
            with pytest.raises(httpx2.ReadTimeout):
                await client.get(f"http://127.0.0.1:{port}/")


async def test_the_end_of_the_stream_reads_empty_and_marks_the_connection_readable():
    async def bye(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"bye")
        writer.close()

    server = await asyncio.start_server(bye, "127.0.0.1", 0)
    async with server:
        stream = await AsyncioNetworkBackend().connect_tcp("127.0.0.1", server.sockets[0].getsockname()[1])
        assert await stream.read(10) == b"bye"
        assert await stream.read(10) == b""
        assert stream.get_extra_info("is_readable") is True
        await stream.aclose()


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-days",
            "1",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


async def test_https_works_over_start_tls_and_a_certificate_it_does_not_trust_is_a_connect_error(certificate):
    key, cert = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    server, port, _ = await _http_server(b"secret", ssl_context=server_context)
    async with server:
        async with _client(verify=ssl.create_default_context(cafile=str(cert))) as client:
            response = await client.get(f"https://127.0.0.1:{port}/")
            assert response.content == b"secret"
            assert response.extensions["network_stream"].get_extra_info("ssl_object") is not None
        async with _client() as client:  # the system's CAs: the self-signed certificate is refused
            with pytest.raises(httpx2.ConnectError):
                await client.get(f"https://127.0.0.1:{port}/")


def test_a_client_without_a_connection_pool_is_left_alone():
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(lambda request: httpx2.Response(200)))
    assert use_asyncio_network(client) == 0


async def test_the_kernels_etimedout_is_a_broken_connection_not_a_deadline():
    import errno

    class DeadPeer:
        async def read(self, n: int) -> bytes:
            raise TimeoutError(errno.ETIMEDOUT, "Connection timed out")

        def at_eof(self) -> bool:
            return False

    from providers._asyncio_net import AsyncioNetworkStream

    stream = AsyncioNetworkStream(DeadPeer(), None)  # type: ignore[arg-type]
    with pytest.raises(httpcore2.ReadError):
        await stream.read(10)


def test_proxy_mounts_from_the_environment_are_switched_too(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    client = httpx2.AsyncClient()
    assert len(client._mounts) >= 2
    assert use_asyncio_network(client) == 1 + sum(1 for t in client._mounts.values() if t is not None)
    assert all(
        isinstance(t._pool._network_backend, AsyncioNetworkBackend) for t in client._mounts.values() if t
    )
