"""The Feishu Open API over HTTP: ``delivery.platforms.feishu.api.FeishuApi`` with httpx2 (FEISHU.md §1–§2).

:class:`FeishuClient` authenticates every call with the app's tenant access token: cached until
10 minutes before it expires, fetched single-flight (concurrent callers wait for one request),
dropped and fetched again **once** when a call answers an invalid-token code (99991661/3/5; the
SDK never does this). The body's ``code`` is always read, also on HTTP 200; a non-zero code raises
:class:`FeishuApiError` with the ``log_id`` and, when rate limited, ``retry_after`` from
``x-ogw-ratelimit-reset``. No answer (connect error, timeout, a body that is not JSON) raises
:class:`FeishuTransportError`. The app secret and the token never appear in an error or a log line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx2

from delivery.platforms.feishu.api import (
    TOKEN_INVALID_CODES,
    FeishuApiError,
    FeishuTransportError,
)

__all__ = ["TOKEN_MARGIN_SECONDS", "FeishuClient"]

log = logging.getLogger(__name__)

#: A token is used until this long before it expires (the SDK's own margin, FEISHU.md §2).
TOKEN_MARGIN_SECONDS = 600.0
MAX_RESOURCE_BYTES = 100 * 1024 * 1024


class FeishuClient:
    """One app's Open API client (module docstring).

    Args:
        api_base: ``https://open.feishu.cn`` (or Lark's, or a local fake), no trailing slash.
        app_id: The App ID (``cli_…``).
        app_secret: The App Secret.
        timeout: Seconds for connecting and for each read of a call.
        clock: Seconds, monotonic (token expiry).
        transport: An httpx2 transport (tests), else the network.
    """

    def __init__(
        self,
        api_base: str,
        app_id: str,
        app_secret: str,
        *,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.api_base = api_base.rstrip("/")
        self.app_id = app_id
        self._app_secret = app_secret
        self._clock = clock
        self._http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(timeout), transport=transport, follow_redirects=False
        )
        self._token: str | None = None
        self._token_expires_at = 0.0
        self._token_lock = asyncio.Lock()
        self.token_fetches = 0  # how many tokens were requested (health, tests)

    def __repr__(self) -> str:  # never the secret or the token
        return f"FeishuClient({self.api_base!r}, app_id={self.app_id!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- the tenant access token (FEISHU.md §2) ----------------------------------------------

    async def tenant_token(self) -> str:
        """The cached token, or a new one (single-flight). Raises FeishuError."""
        if self._token is not None and self._clock() < self._token_expires_at:
            return self._token
        async with self._token_lock:
            if self._token is not None and self._clock() < self._token_expires_at:
                return self._token
            body = await self._request(
                "POST",
                "/open-apis/auth/v3/tenant_access_token/internal",
                json_body={"app_id": self.app_id, "app_secret": self._app_secret},
                token=None,
            )
            token = body.get("tenant_access_token")
            if not isinstance(token, str) or not token:
                raise FeishuTransportError("the token answer has no tenant_access_token")
            expire = float(body.get("expire") or 0)
            self.token_fetches += 1
            self._token, self._token_expires_at = (
                token,
                self._clock() + max(expire - TOKEN_MARGIN_SECONDS, 0.0),
            )
            return token

    def drop_token(self, token: str) -> None:
        """Forgets ``token`` (the platform called it invalid), unless a newer one replaced it."""
        if self._token == token:
            self._token, self._token_expires_at = None, 0.0

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """One authenticated call; returns the answer body. Retried once with a fresh token on
        the invalid-token codes. Raises FeishuError."""
        token = await self.tenant_token()
        try:
            return await self._request(method, path, json_body=json_body, params=params, token=token)
        except FeishuApiError as exc:
            if exc.code not in TOKEN_INVALID_CODES:
                raise
            log.info("feishu token refused (%d): fetching a new one", exc.code)
            self.drop_token(token)
        token = await self.tenant_token()
        return await self._request(method, path, json_body=json_body, params=params, token=token)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None,
        token: str | None,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        headers = {"Content-Type": "application/json; charset=utf-8"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        content = json.dumps(json_body, ensure_ascii=False).encode() if json_body is not None else None
        try:
            response = await self._http.request(
                method, self.api_base + path, content=content, headers=headers, params=params
            )
        except httpx2.HTTPError as exc:
            raise FeishuTransportError(f"{method} {path}: {type(exc).__name__}") from None
        return _body(response, f"{method} {path}")

    # --- FeishuApi --------------------------------------------------------------------------

    async def bot_info(self) -> dict[str, Any]:
        body = await self.call("GET", "/open-apis/bot/v3/info")
        bot = body.get("bot")
        return bot if isinstance(bot, dict) else {}

    async def send_message(self, chat_id: str, msg_type: str, content: dict[str, Any], *, uuid: str) -> str:
        body = await self.call(
            "POST",
            "/open-apis/im/v1/messages",
            params={"receive_id_type": "chat_id"},
            json_body={
                "receive_id": chat_id,
                "msg_type": msg_type,
                "content": _content(content),
                "uuid": uuid,
            },
        )
        return _message_id(body)

    async def reply_message(
        self, message_id: str, msg_type: str, content: dict[str, Any], *, uuid: str
    ) -> str:
        body = await self.call(
            "POST",
            f"/open-apis/im/v1/messages/{_segment(message_id)}/reply",
            json_body={"msg_type": msg_type, "content": _content(content), "uuid": uuid},
        )
        return _message_id(body)

    async def create_card(self, card: dict[str, Any]) -> str:
        body = await self.call(
            "POST", "/open-apis/cardkit/v1/cards", json_body={"type": "card_json", "data": _content(card)}
        )
        card_id = _dict(body.get("data")).get("card_id")
        if not isinstance(card_id, str) or not card_id:
            raise FeishuTransportError("the card answer has no card_id")
        return card_id

    async def stream_text(
        self, card_id: str, element_id: str, text: str, *, sequence: int, uuid: str
    ) -> None:
        await self.call(
            "PUT",
            f"/open-apis/cardkit/v1/cards/{_segment(card_id)}/elements/{_segment(element_id)}/content",
            json_body={"content": text, "sequence": sequence, "uuid": uuid},
        )

    async def set_streaming(self, card_id: str, enabled: bool, *, sequence: int, uuid: str) -> None:
        settings = _content({"config": {"streaming_mode": enabled}})
        await self.call(
            "PATCH",
            f"/open-apis/cardkit/v1/cards/{_segment(card_id)}/settings",
            json_body={"settings": settings, "sequence": sequence, "uuid": uuid},
        )

    async def get_resource(self, message_id: str, file_key: str, kind: str) -> tuple[bytes, str]:
        """The bytes of an image or file of a message (≤ 100 MB) and its content type."""
        path = f"/open-apis/im/v1/messages/{_segment(message_id)}/resources/{_segment(file_key)}"
        for attempt in (1, 2):
            token = await self.tenant_token()
            headers = {"Authorization": f"Bearer {token}"}
            try:
                response = await self._http.get(self.api_base + path, params={"type": kind}, headers=headers)
            except httpx2.HTTPError as exc:
                raise FeishuTransportError(f"GET resource: {type(exc).__name__}") from None
            kind_header = response.headers.get("content-type", "")
            if response.status_code == 200 and not kind_header.startswith("application/json"):
                if len(response.content) > MAX_RESOURCE_BYTES:
                    raise FeishuApiError(234037, "resource over 100 MB", http_status=200)
                return response.content, kind_header
            try:
                _body(response, "GET resource")
            except FeishuApiError as exc:
                if attempt == 1 and exc.code in TOKEN_INVALID_CODES:
                    self.drop_token(token)
                    continue
                raise
            raise FeishuTransportError("GET resource: a JSON answer without an error code")
        raise AssertionError("unreachable")


def _body(response: httpx2.Response, what: str) -> dict[str, Any]:
    """The answer body; raises FeishuApiError on a non-zero ``code`` (any HTTP status)."""
    try:
        body = response.json()
    except ValueError:
        raise FeishuTransportError(f"{what}: HTTP {response.status_code}, not a JSON body") from None
    if not isinstance(body, dict):
        raise FeishuTransportError(f"{what}: HTTP {response.status_code}, not a JSON object")
    code = body.get("code")
    if code == 0 and response.status_code < 400:
        return body
    log_id = _dict(body.get("error")).get("log_id") or response.headers.get("x-tt-logid")
    reset = response.headers.get("x-ogw-ratelimit-reset")
    try:
        retry_after = float(reset) if reset is not None else None
    except ValueError:
        retry_after = None
    raise FeishuApiError(
        code if isinstance(code, int) and code != 0 else -response.status_code,
        str(body.get("msg") or "")[:200],
        http_status=response.status_code,
        log_id=str(log_id) if log_id else None,
        retry_after=retry_after,
    )


def _message_id(body: dict[str, Any]) -> str:
    message_id = _dict(body.get("data")).get("message_id")
    if not isinstance(message_id, str) or not message_id:
        raise FeishuTransportError("the message answer has no message_id")
    return message_id


def _segment(value: str) -> str:
    """An id as one URL path segment (ids come from events: never trusted to be plain)."""
    return quote(value, safe="")


def _content(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}
