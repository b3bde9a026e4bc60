"""``/v1``: the OpenAI-compatible endpoint (issue 18) as plain async Django views.

Not part of the ninja control API: its errors are OpenAI's ``{"error": {message, type, param,
code}}`` with OpenAI's status codes, its only authentication is an API token
(``Authorization: Bearer``, with the REST token-guessing limit), it needs no CSRF token and
never redirects. Every view is ``async`` and reaches storage through ``run_storage`` (DESIGN §2).

- ``POST /v1/chat/completions``: a turn (``request_turn``), answered as one ``chat.completion``
  once committed, or streamed as ``chat.completion.chunk`` server-sent events.
- ``GET /v1/models``, ``GET /v1/models/{id}``: the model presets that can answer.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from conversations.api.auth import BearerToken
from conversations.api.errors import ApiError, oversized_body
from conversations.api.openai_compat import wire
from conversations.api.openai_compat.request_turn import (
    DIALOG_HEADER,
    TURN_ENDINGS,
    RequestTurn,
    turn_error,
)
from conversations.api.openai_compat.wire import WireError
from conversations.auth import throttle
from conversations.runtime.provider import model_catalog

log = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0
"""A stream that sent nothing for this long sends an SSE comment (proxies close idle streams)."""


def _error(request: HttpRequest, exc: WireError, cause: BaseException | None = None) -> JsonResponse:
    """The OpenAI error answer; one log line (5xx as errors, with a reference id in the message;
    a turn's own ending is logged by its worker, and a failed turn's message has that ref)."""
    body = exc.body()
    where = f"{request.method} {request.path[:200]!r}"
    if exc.status >= 500 and exc.code not in TURN_ENDINGS:
        ref = secrets.token_hex(4)
        body["error"]["message"] = f"{exc.message} (ref {ref})"
        log.error(
            "openai %s → %d %s (ref %s): %s", where, exc.status, exc.code, ref, exc.message, exc_info=cause
        )
    else:
        log.info("openai %s → %d %s: %s", where, exc.status, exc.code, exc.message)
    response = JsonResponse(body, status=exc.status, json_dumps_params={"ensure_ascii": False})
    for name, value in exc.headers.items():
        response[name] = value
    return response


def _header_text(value: str) -> str:
    """A header value as its sender meant it: ASGI servers decode header bytes as Latin-1, so
    a UTF-8 title arrives as mojibake; bytes that are not UTF-8 stay as they came."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def _unexpected(exc: BaseException) -> WireError:
    if isinstance(exc, (OperationalError, InterfaceError)):
        return WireError(
            503,
            "the database is unavailable; try again shortly",
            type=wire.SERVER_ERROR,
            code="unavailable",
            headers={"Retry-After": "5"},
        )
    return WireError(
        500, "the server could not handle this request", type=wire.SERVER_ERROR, code="internal_error"
    )


async def _guarded(request: HttpRequest, method: str, handle: Any, *args: Any) -> HttpResponse:
    """Run ``handle`` for ``method`` requests; every failure becomes an OpenAI error answer."""
    if request.method != method:
        response = _error(request, WireError(405, f"use {method} here", code="method_not_allowed"))
        response["Allow"] = method
        return response
    try:
        if oversized_body(request):
            raise WireError(413, "the request body exceeds 1 MiB", code="request_too_large")
        user = await _authenticate(request)
        return await handle(request, user, *args)
    except WireError as exc:
        return _error(request, exc)
    except Exception as exc:
        return _error(request, _unexpected(exc), exc)


async def _authenticate(request: HttpRequest) -> Any:
    """The token's active user. Raises WireError 401 ``invalid_api_key``, or 429 while this
    address has failed too often (``conversations.auth.throttle``, as on ``/api/``)."""
    try:
        user = await BearerToken()(request)
    except ApiError as exc:
        raise WireError(429, exc.message, type="requests", code=exc.code, headers=exc.headers) from None
    if user is None:
        raise WireError(
            401,
            "invalid API key: send Authorization: Bearer <token> (manage.py createtoken USER)",
            code="invalid_api_key",
            headers={"WWW-Authenticate": 'Bearer realm="picobot"'},
        )
    return user


def _available_presets() -> list[str]:
    return [p.name for p in model_catalog().presets.values() if not p.key_missing]


def _preset(name: str) -> str:
    """The preset ``name`` names exactly. Raises WireError 404 ``model_not_found``, or 503
    ``model_unavailable`` when the server has no key for it."""
    preset = model_catalog().presets.get(name)
    if preset is None:
        shown = name if len(name) <= 64 else name[:64] + "…"
        raise WireError(
            404,
            f"the model {shown!r} does not exist; GET /v1/models lists them",
            param="model",
            code="model_not_found",
        )
    if preset.key_missing:
        raise WireError(
            503,
            f"the model {name!r} is not available on this server",
            type=wire.SERVER_ERROR,
            param="model",
            code="model_unavailable",
        )
    return preset.name


@csrf_exempt
async def models(request: HttpRequest) -> HttpResponse:
    """``GET /v1/models``: ``{"object": "list", "data": [{id, object, created, owned_by}]}``."""

    async def handle(request: HttpRequest, user: Any) -> HttpResponse:
        return JsonResponse(wire.models_list(_available_presets()))

    return await _guarded(request, "GET", handle)


@csrf_exempt
async def model(request: HttpRequest, model_id: str) -> HttpResponse:
    """``GET /v1/models/{id}``: one model object; 404 ``model_not_found``."""

    async def handle(request: HttpRequest, user: Any, model_id: str) -> HttpResponse:
        return JsonResponse(wire.model_object(_preset(model_id)))

    return await _guarded(request, "GET", handle, model_id)


@csrf_exempt
async def unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other ``/v1/…`` path: 404 in OpenAI's shape (never an HTML page or a redirect)."""
    return _error(request, WireError(404, "no such endpoint", code="unknown_url"))


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """``POST /v1/chat/completions`` (OpenAI's Chat Completions API, text only).

    Answers ``chat.completion`` (200) after the turn committed, or with ``"stream": true`` a
    ``text/event-stream`` of ``chat.completion.chunk`` events ending ``data: [DONE]``. Errors:
    400 (the body, ``wire.parse_request``; a bad dialog name), 401, 404 (``model_not_found``,
    ``dialog_not_found``), 409 (the turn was stopped), 413, 429 (token guessing, messages per
    minute, a full inbox, the daily budget; ``Retry-After``), 500 (the turn failed), 503, 504.
    """
    return await _guarded(request, "POST", _complete)


async def _complete(request: HttpRequest, user: Any) -> HttpResponse:
    body = wire.parse_request(request.body)
    preset = _preset(body.model)
    retry_after = throttle.take_message(user.pk)
    if retry_after is not None:  # issue 16: refused, not stored
        raise WireError(
            429,
            throttle.too_many_messages_message(retry_after),
            type="requests",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(retry_after)},
        )
    name = _header_text(request.headers.get(DIALOG_HEADER) or "").strip() or body.user
    turn = await RequestTurn.open(user, body, preset, name)
    if body.stream:
        response = StreamingHttpResponse(_Stream(turn), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    else:
        response = await _answer(turn)
    if not turn.retire:
        response["X-PicoBot-Dialog-Id"] = turn.dialog_id
    return response


async def _answer(turn: RequestTurn) -> HttpResponse:
    """The ``chat.completion`` of a committed turn, or its error."""
    ended = False
    try:
        state: dict = {}
        async for update in turn.follow():
            if update.ended is not None:
                state, ended = update.ended, True
        error = turn_error(state)
        if error is not None:
            raise error
        content, reasoning, truncated = wire.committed_parts(state["rows"])
        usage = await turn.turn_usage(state)
        answer = wire.completion(
            turn.completion_id,
            turn.created,
            turn.request.model,
            content,
            reasoning,
            "length" if truncated else "stop",
            usage,
        )
        return JsonResponse(answer, json_dumps_params={"ensure_ascii": False})
    except TimeoutError:
        raise WireError(
            504,
            "the turn did not end in time; no worker may be running",
            type=wire.SERVER_ERROR,
            code="timeout",
        ) from None
    finally:
        await turn.end(ended)  # a disconnect cancels this task: the turn is stopped


class _Stream:
    """The event stream of a turn (an async iterable); ``close()`` — Django calls it when the
    response ends, also one never iterated — abandons a turn the stream did not see end."""

    def __init__(self, turn: RequestTurn) -> None:
        self.turn = turn
        self.loop = asyncio.get_running_loop()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._events()

    def close(self) -> None:
        self.turn.end_from_thread(self.loop)

    async def _events(self) -> AsyncIterator[bytes]:
        turn, ended = self.turn, False
        cid, created, name = turn.completion_id, turn.created, turn.request.model
        tracker = wire.DeltaTracker()
        try:
            yield wire.sse_event(wire.chunk(cid, created, name, {"role": "assistant", "content": ""}))
            quiet_since = self.loop.time()
            try:
                async for update in turn.follow():
                    events: list[bytes] = []
                    if update.snapshot is not None:
                        content, reasoning = wire.answer_parts(update.snapshot.get("blocks") or ())
                        events = [
                            wire.sse_event(c)
                            for c in wire.delta_chunks(
                                cid, created, name, *tracker.advance(content, reasoning)
                            )
                        ]
                    elif update.ended is not None:
                        ended = True
                        events = await self._ending(tracker, update.ended)
                    elif self.loop.time() - quiet_since >= KEEPALIVE_SECONDS:
                        events = [wire.SSE_KEEPALIVE]
                    if events:
                        quiet_since = self.loop.time()
                        yield b"".join(events)
            except TimeoutError:
                error = WireError(504, "the turn did not end in time", type=wire.SERVER_ERROR, code="timeout")
                yield wire.sse_event(error.body()) + wire.SSE_DONE
            if tracker.diverged:
                log.info("stream %s: %d snapshots rewrote text already sent", cid, tracker.diverged)
        finally:
            await turn.end(ended)  # a disconnect cancels the iteration: the turn is stopped

    async def _ending(self, tracker: wire.DeltaTracker, state: dict) -> list[bytes]:
        """The last events: what the committed rows add to what was sent, then the finish
        chunk (and the usage chunk) or the error event, then ``[DONE]``."""
        turn = self.turn
        cid, created, name = turn.completion_id, turn.created, turn.request.model
        content, reasoning, truncated = wire.committed_parts(state.get("rows") or [])
        chunks = wire.delta_chunks(cid, created, name, *tracker.advance(content, reasoning))
        events = [wire.sse_event(c) for c in chunks]
        error = turn_error(state)
        if error is not None:
            events.append(wire.sse_event(error.body()))
        else:
            events.append(
                wire.sse_event(wire.chunk(cid, created, name, {}, "length" if truncated else "stop"))
            )
            if turn.request.include_usage:
                events.append(
                    wire.sse_event(wire.usage_chunk(cid, created, name, await turn.turn_usage(state)))
                )
        events.append(wire.SSE_DONE)
        return events
