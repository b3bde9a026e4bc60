"""What a chat and the admin are told when a dialog's storage or a turn's delivery fails.

Every function here is best effort: a notice or a bookkeeping row that cannot be written is
logged, never raised, so reporting a failure never breaks the dialog (seed 004 §4.4,
seed 003 §14.2, seed 000 §5). Storage errors reach the log redacted (``log_safe``).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable

from conversations import storage
from conversations.agent.failures import TurnFailure, TurnFailurePresenter
from conversations.agent.log_safety import describe_exception, log_safe
from conversations.context.overflow import Publish
from conversations.runtime import notify
from conversations.runtime.turn_context import TurnContext
from conversations.runtime.turn_sinks import split_session_id
from conversations.storage.runner import run_storage
from delivery.failures import record_delivery_failure
from delivery.turn_delivery import FailureReport
from picobot_site.metrics import instruments
from providers.fallback import FallbackSwitch, OnSwitch

log = logging.getLogger(__name__)

STORAGE_ALERT_INTERVAL = 60.0
"""Seconds between two "storage is failing" notices of one dialog (the inbox scan retries often)."""


async def alert_storage_failing(context: TurnContext, dialog_id: str, exc: Exception) -> None:
    """Log a storage failure that outlasted the retries and tell the dialog's chat, at most once
    per :data:`STORAGE_ALERT_INTERVAL` seconds per dialog (``context.storage_alerts``)."""
    ref = secrets.token_hex(4)
    log.error(
        "dialog %s: storage failed after retries (ref %s): %s",
        dialog_id,
        ref,
        log_safe(describe_exception(exc)),
    )
    now = time.monotonic()
    alerts = context.storage_alerts
    if now - alerts.get(dialog_id, -STORAGE_ALERT_INTERVAL) < STORAGE_ALERT_INTERVAL:
        return
    alerts[dialog_id] = now
    channel, chat_id = split_session_id(dialog_id)
    try:
        await notify.publish_notification(
            channel,
            chat_id,
            "error",
            f"Storage is failing right now (ref {ref}). Nothing you sent is lost: messages waiting "
            f"in this dialog run when it recovers.",
            session_id=dialog_id,
        )
    except Exception:
        log.exception("dialog %s: could not send the storage alert (ref %s)", dialog_id, ref)


async def report_refused_commit(
    context: TurnContext,
    start: storage.TurnStart,
    epoch: int,
    failure: TurnFailure,
    presenter: TurnFailurePresenter,
) -> None:
    """After a commit storage refused (seed 003 §14.2): end the turn's inbox row ``failed`` with
    the error its terminal snapshot shows (``presenter``'s words, with the failure's ref: the
    user row's ``outcome`` in history), and tell the chat its streamed preview was not saved
    (DB: one trip)."""
    try:
        await run_storage(
            storage.abandon_turn,
            start.dialog_id,
            context.worker_id,
            epoch,
            start.inbox_id,
            presenter.present(failure),
        )
    except Exception as exc:  # a storage error: redacted, like every failure's detail
        log.error(
            "turn %s: could not mark its inbox row done either (ref %s): %s",
            start.turn_id,
            failure.ref,
            log_safe(describe_exception(exc)),
        )
    notice = presenter.notice(failure)
    if notice is not None:
        try:
            await notify.publish_notification(
                start.channel, start.chat_id, "error", notice, session_id=start.dialog_id
            )
        except Exception:
            log.exception("turn %s: could not send the not-saved notice (ref %s)", start.turn_id, failure.ref)


async def record_failed_delivery(start: storage.TurnStart, failure: FailureReport) -> None:
    """One ``DeliveryFailure`` row for the admin (DB: one trip); bookkeeping never breaks the dialog."""
    try:
        await run_storage(
            record_delivery_failure,
            channel=start.channel,
            chat_id=start.chat_id,
            dialog_id=start.dialog_id,
            turn_id=start.turn_id,
            stage=failure.stage,
            error=failure.error,
            attempts=failure.attempts,
        )
    except Exception:
        log.exception("turn %s: could not record its delivery failure (%s)", start.turn_id, failure.error)


def context_notice(start: storage.TurnStart) -> Publish:
    """Publishes a context-preparation notice (a failed compaction, left-out messages) to the chat."""

    async def publish(text: str) -> None:
        await notify.publish_notification(
            start.channel, start.chat_id, "warning", text, session_id=start.dialog_id
        )

    return publish


def fallback_notice(start: storage.TurnStart, answered: Callable[[str], object]) -> OnSwitch:
    """The turn's ``on_switch`` of a fallback chain (``providers.fallback``, issue 17): calls
    ``answered`` with the preset taking over (what the commit records), counts it
    (``picobot_fallbacks_total``) and tells the chat
    "Model A is rate-limited; answering with B." (a ``warning`` notification, once per switch)."""

    async def switched(switch: FallbackSwitch) -> None:
        answered(switch.next)
        instruments.record_fallback(switch.failed, switch.next, switch.error.kind)
        log.warning(
            "turn %s: model preset %s failed (%s); falling back to %s",
            start.turn_id,
            switch.failed,
            switch.error.kind,
            switch.next,
        )
        try:
            await notify.publish_notification(
                start.channel,
                start.chat_id,
                "warning",
                switch.notice,
                session_id=start.dialog_id,
                key=f"fallback:{start.turn_id}:{switch.next}",
            )
        except Exception:
            log.exception("turn %s: could not tell the chat about its fallback", start.turn_id)

    return switched
