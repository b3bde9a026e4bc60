"""Background title generation (seed 004 §5.4, seed 000 §12, DESIGN §6).

After a turn commits, the executor calls :meth:`TitleService.schedule` and goes straight on to
the next message. In a supervised background task (seed 000 §12):

1. ``storage.title_candidate`` claims the attempt if one is due and reads the first rows
   (a short storage call; nothing is held afterwards);
2. the provider is asked for a title, outside any lock, bounded by ``timeout``;
3. ``clean_title`` keeps the visible title (think spans stripped; none for a reasoning-only
   answer); an answer the model did not end itself (``AssistantResponse.finished_normally``:
   cut off, filtered, refused) gives no title;
4. ``storage.commit_generated_title`` stores it only while the title is still the default and
   the dialog is live — a user rename that happened meanwhile wins;
5. a ``session_changed`` frame (PROTOCOL §1) tells the chat's clients.

A failure at any step is a log warning only: the turn, the dialog and the user never see it.
The offline replay provider never names dialogs (its canned answer is not a title).
"""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings

from conversations import storage
from conversations.runtime import notify
from conversations.runtime.supervisor import SupervisorClosedError, TaskSupervisor
from conversations.storage.runner import run_storage
from conversations.titles.rules import build_title_request, clean_title
from conversations.usage.scopes import dialog_scope
from providers.base import LLMProvider
from providers.errors import ProviderError

log = logging.getLogger(__name__)

# On top of the provider's bound: the task's three short storage calls (with their retries).
STORAGE_MARGIN_SECONDS = 30.0


class TitleService:
    """Schedules title generation for dialogs whose title is still the default.

    Args:
        provider: the model that writes titles (the worker's provider).
        supervisor: owns the background tasks (cancelled and awaited at shutdown).
        after_n: attempt when ``after_n`` user messages were committed since the last attempt
            (seed 004 §5.4: 10); 0 = never by count.
        on_first: also attempt once the first user message was committed.
        timeout: seconds the provider may take for one title.
    """

    def __init__(
        self,
        provider: LLMProvider,
        supervisor: TaskSupervisor,
        *,
        after_n: int,
        on_first: bool,
        timeout: float,
    ) -> None:
        self.provider = provider
        self.supervisor = supervisor
        self.after_n = after_n
        self.on_first = on_first
        self.timeout = timeout

    @classmethod
    def from_settings(cls, provider: LLMProvider, supervisor: TaskSupervisor) -> TitleService:
        """A service configured by ``PICOBOT.auto_title_after``,
        ``["AUTO_TITLE_ON_FIRST_MESSAGE"]`` and ``["TITLE_TIMEOUT"]`` (seconds)."""
        config = settings.PICOBOT
        return cls(
            provider,
            supervisor,
            after_n=config.auto_title_after,
            on_first=config.auto_title_on_first_message,
            timeout=config.title_timeout,
        )

    @property
    def enabled(self) -> bool:
        """Whether titles are generated at all (configured, and a real model is there)."""
        return (self.after_n > 0 or self.on_first) and not self.provider.offline

    def schedule(self, dialog_id: str) -> None:
        """Start a title attempt for ``dialog_id`` in the background if one may be due.

        Non-blocking; never raises; nothing is started after the supervisor closed (shutdown).
        Whether an attempt is due is decided in the task by ``storage.title_candidate``, whose
        conditional claim also keeps two overlapping tasks from asking the model twice.
        """
        if not self.enabled or not dialog_id:
            return
        try:
            self.supervisor.spawn(
                self._generate(dialog_id),
                name=f"title:{dialog_id}",
                timeout=self.timeout + STORAGE_MARGIN_SECONDS,
            )
        except SupervisorClosedError:
            log.debug("no title for %s: shutting down", dialog_id)

    async def _generate(self, dialog_id: str) -> None:
        try:
            await self._attempt(dialog_id)
        except Exception:
            log.warning("title of %s: failed", dialog_id, exc_info=True)

    async def _attempt(self, dialog_id: str) -> None:
        candidate = await run_storage(storage.title_candidate, dialog_id, self.after_n, self.on_first)
        if candidate is None:
            return
        try:
            request = build_title_request(candidate["rows"])
        except ValueError:
            log.info("title of %s: no text to name it by yet", dialog_id)
            return
        try:
            with dialog_scope("title", dialog_id, keep_turn=False):  # its own usage row (issue 17)
                async with asyncio.timeout(self.timeout):
                    response = await self.provider.collect(request)
        except TimeoutError:
            log.warning("title of %s: the model took longer than %g s", dialog_id, self.timeout)
            return
        except ProviderError as exc:
            # The kind and status only: provider payloads stay out of the log (seed 003 §6.2).
            log.warning("title of %s: provider error %s (HTTP %s)", dialog_id, exc.kind, exc.http_status)
            return
        if not response.finished_normally:
            # A cut-off or filtered answer may still look like a title ("The user's question
            # about"): no title beats a wrong one, and the next attempt comes later.
            log.warning("title of %s: the model's answer did not finish normally", dialog_id)
            return
        title = clean_title(response.text)
        if title is None:
            log.warning("title of %s: the model's answer held no usable title", dialog_id)
            return
        dialog = await run_storage(storage.commit_generated_title, dialog_id, title)
        if dialog is None:
            log.info("title of %s discarded: the dialog was renamed or deleted meanwhile", dialog_id)
            return
        active = await run_storage(storage.is_active_dialog, dialog.channel, dialog.chat_id, dialog.id)
        await notify.publish_frame(
            dialog.channel, dialog.chat_id, notify.session_changed(dialog, active=active)
        )
