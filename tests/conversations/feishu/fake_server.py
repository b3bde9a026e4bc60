"""The fake Feishu Open API served over real HTTP on 127.0.0.1 (FEISHU.md §1–§2, §6–§10).

:class:`FakeFeishuServer` puts the in-memory fake (``tests.delivery.feishu.fake_api``: messages,
uuid de-duplication for an hour, CardKit cards with strict sequences and the 10-minute streaming
window, error injection per operation) behind the real endpoints and wire format, and adds what
only HTTP has:

- the tenant token endpoint (``expire`` 7200 s; :meth:`FakeFeishuServer.revoke_tokens` makes
  every issued token answer 99991663, with HTTP 400 or — as peers saw — HTTP 200);
- the bot info endpoint (``ou_bot``) and message resources (:attr:`FakeFeishuServer.images`);
- error bodies ``{code, msg, error: {log_id}}`` with ``x-ogw-ratelimit-reset`` on rate limits;
  a transport error is a connection closed without an answer (after applying the call when the
  failure says ``applied``);
- :meth:`FakeFeishuServer.hold`: the next matching call is applied and then left unanswered until
  released (a process killed between the platform's acceptance and its own record of it).

Every request is recorded (:attr:`FakeFeishuServer.requests`: method, path, body).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from delivery.platforms.feishu.api import FeishuApiError, FeishuTransportError
from tests.delivery.feishu.fake_api import FakeFeishuApi

APP_ID = "cli_test_app"
APP_SECRET = "app-secret-for-tests"
BOT_OPEN_ID = "ou_bot"


@dataclass
class Hold:
    op: str
    when: Any
    applied: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    times: int = 1


class _Dropped(Exception):
    """Close the connection without an answer."""


class FakeFeishuServer:
    """See the module docstring. Use as a context manager, or ``start()`` / ``stop()``."""

    def __init__(self, api: FakeFeishuApi | None = None) -> None:
        self.api = api or FakeFeishuApi()
        self.images: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.tokens: dict[str, bool] = {}  # token → valid
        self.token_error_status = 400
        self.holds: list[Hold] = []
        # What ``POST /callback/ws/endpoint`` answers (the long connection's websocket URL), if set.
        self.ws_endpoint_reply: dict | None = None
        self._token_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeFeishuServer:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        for hold in self.holds:
            hold.release.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeFeishuServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- test controls ---------------------------------------------------------------------

    def revoke_tokens(self) -> None:
        """Every token issued so far answers 99991663 from now on."""
        with self._lock:
            for token in self.tokens:
                self.tokens[token] = False

    def hold(self, op: str, when: Any = None) -> Hold:
        """The next ``op`` call (matching ``when(kwargs)``) is applied, then left unanswered until
        ``hold.release`` is set; then its connection is closed without an answer."""
        hold = Hold(op, when)
        self.holds.append(hold)
        return hold

    def token_requests(self) -> int:
        return sum(1 for _, path, _ in self.requests if path.endswith("/tenant_access_token/internal"))

    # --- serving -----------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _serve(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                query = {k: v[0] for k, v in parse_qs(split.query).items()}
                auth = self.headers.get("authorization", "")
                try:
                    status, headers, payload = fake._route(self.command, split.path, query, body, auth)
                except _Dropped:
                    self.close_connection = True
                    return
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = _serve

        return Handler

    def _route(
        self, method: str, path: str, query: dict[str, str], body: Any, auth: str
    ) -> tuple[int, dict[str, str], bytes]:
        self.requests.append((method, path, body))
        if path == "/callback/ws/endpoint" and self.ws_endpoint_reply is not None:
            if not body or body.get("AppID") != APP_ID or body.get("AppSecret") != APP_SECRET:
                return _json(200, {"code": 10014, "msg": "app secret invalid"})
            return _json(200, self.ws_endpoint_reply)
        if path == "/open-apis/auth/v3/tenant_access_token/internal":
            if not body or body.get("app_id") != APP_ID or body.get("app_secret") != APP_SECRET:
                return _json(400, {"code": 10014, "msg": "app secret invalid"})
            token = f"t-{next(self._token_ids)}"
            with self._lock:
                self.tokens[token] = True
            return _json(200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200})
        token = auth.removeprefix("Bearer ").strip()
        with self._lock:
            valid = self.tokens.get(token, False)
        if not valid:
            return _json(self.token_error_status, {"code": 99991663, "msg": "Invalid access token"})
        if path == "/open-apis/bot/v3/info":
            return _json(
                200, {"code": 0, "msg": "ok", "bot": {"open_id": BOT_OPEN_ID, "app_name": "PicoBot"}}
            )
        match = re.fullmatch(r"/open-apis/im/v1/messages/([^/]+)/resources/([^/]+)", path)
        if match:
            data = self.images.get(match.group(2))
            if data is None:
                return _json(400, {"code": 234003, "msg": "file not found"})
            return 200, {"content-type": "image/png"}, data
        try:
            op, args = _operation(method, path, query, body or {})
        except (AssertionError, KeyError, ValueError) as exc:
            return _json(404, {"code": 404, "msg": f"the fake has no such call: {exc}"})
        return self._apply(op, args)

    def _apply(self, op: str, args: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        hold = next(
            (h for h in self.holds if h.op == op and h.times > 0 and (h.when is None or h.when(args))), None
        )
        if hold is not None:
            hold.times -= 1
        with self._lock:
            try:
                result = asyncio.run(getattr(self.api, op)(**args))
            except FeishuTransportError:
                raise _Dropped from None
            except FeishuApiError as exc:
                headers = {}
                if exc.retry_after is not None:
                    headers["x-ogw-ratelimit-reset"] = str(exc.retry_after)
                body = {"code": exc.code, "msg": exc.msg, "error": {"log_id": "fake-log-id"}}
                return _json(exc.http_status or 400, body, headers)
        if hold is not None:
            hold.applied.set()
            hold.release.wait(30)
            raise _Dropped
        data: dict[str, Any] = {}
        if op in ("send_message", "reply_message"):
            data = {"message_id": result}
        elif op == "create_card":
            data = {"card_id": result}
        return _json(200, {"code": 0, "msg": "success", "data": data})


def _operation(method: str, path: str, query: dict[str, str], body: dict) -> tuple[str, dict[str, Any]]:
    """The fake API call of one request: ``(method name, keyword arguments)``."""
    if method == "POST" and path == "/open-apis/im/v1/messages":
        assert query.get("receive_id_type") == "chat_id", query
        return "send_message", {
            "chat_id": body["receive_id"],
            "msg_type": body["msg_type"],
            "content": json.loads(body["content"]),
            "uuid": body.get("uuid"),
        }
    match = re.fullmatch(r"/open-apis/im/v1/messages/([^/]+)/reply", path)
    if method == "POST" and match:
        return "reply_message", {
            "message_id": match.group(1),
            "msg_type": body["msg_type"],
            "content": json.loads(body["content"]),
            "uuid": body.get("uuid"),
        }
    if method == "POST" and path == "/open-apis/cardkit/v1/cards":
        assert body["type"] == "card_json"
        return "create_card", {"card": json.loads(body["data"])}
    match = re.fullmatch(r"/open-apis/cardkit/v1/cards/([^/]+)/elements/([^/]+)/content", path)
    if method == "PUT" and match:
        return "stream_text", {
            "card_id": match.group(1),
            "element_id": match.group(2),
            "text": body["content"],
            "sequence": body["sequence"],
            "uuid": body["uuid"],
        }
    match = re.fullmatch(r"/open-apis/cardkit/v1/cards/([^/]+)/settings", path)
    if method == "PATCH" and match:
        settings = json.loads(body["settings"])
        return "set_streaming", {
            "card_id": match.group(1),
            "enabled": settings["config"]["streaming_mode"],
            "sequence": body["sequence"],
            "uuid": body["uuid"],
        }
    raise AssertionError(f"the fake has no {method} {path}")


def _json(
    status: int, body: dict, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    return (
        status,
        {"content-type": "application/json; charset=utf-8", **(headers or {})},
        json.dumps(body).encode(),
    )
