"""A turn's chat is told when its model request waits before a retry (issue 17).

A rate-limited or overloaded last preset is retried by the transport (``providers._http``),
honouring ``Retry-After`` up to its bound; without a word the user would watch a turn that shows
nothing for up to a minute or two. :func:`observe_retry` (a ``providers.metering`` retry
observer) sends the turn's chat one ``warning`` notification per retry whose wait is at least
:data:`NOTICE_AFTER_SECONDS`: what failed and when the next try comes. Calls outside a turn
(titles, compactions) retry silently.
"""

from __future__ import annotations

import asyncio
import contextlib

from conversations.runtime import notify
from conversations.runtime.supervisor import SupervisorClosedError, control_supervisor
from conversations.runtime.turn_sinks import split_session_id
from providers.metering import ProviderRetry

NOTICE_AFTER_SECONDS = 2.0
"""Shorter waits pass unannounced (a backoff of a second is no silence worth a notice)."""

_REASONS = {
    "rate_limited": "is rate-limited",
    "overloaded": "is overloaded",
    "server_error": "had a server error",
    "timeout": "did not answer in time",
    "connection": "could not be reached",
    "truncated": "cut its answer off",
}


def notice_text(retry: ProviderRetry) -> str:
    """``"The model is rate-limited; trying again in 30 s (retry 1 of 2)."``"""
    reason = _REASONS.get(retry.kind, f"failed ({retry.kind})")
    return (
        f"The model {reason}; trying again in {retry.delay_s:.0f} s "
        f"(retry {retry.attempt} of {retry.max_retries})."
    )


def observe_retry(retry: ProviderRetry) -> None:
    """Tell the turn's chat of a long wait (sync: called in the stream's task; the notice is
    sent by a task of its own, so the stream never waits for the channel layer)."""
    scope = retry.scope
    if scope is None or scope.kind != "turn" or not scope.dialog_id or retry.delay_s < NOTICE_AFTER_SECONDS:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    channel, chat_id = split_session_id(scope.dialog_id)
    key = f"retry:{scope.turn_id}:{retry.attempt}"
    sending = notify.publish_notification(
        channel, chat_id, "warning", notice_text(retry), session_id=scope.dialog_id, key=key
    )
    # Supervised, bounded, reaped at shutdown (DESIGN §5); refused once shutdown began.
    with contextlib.suppress(SupervisorClosedError):
        control_supervisor().spawn(sending, name=key, timeout=10.0)
