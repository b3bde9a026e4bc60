"""A streaming client that closes right after ``[DONE]`` cancels the response's clean-up: the
one-request dialog is still retired (issue 18: such requests leave no dialog in the list)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.api.openai_compat import follow
from conversations.api.openai_compat.request_turn import RequestTurn
from conversations.auth import get_or_create_user
from conversations.models import Dialog


@pytest.mark.django_db(transaction=True)
async def test_a_cancelled_end_still_retires_the_one_request_dialog():
    user = (await database_sync_to_async(get_or_create_user)("erin"))[0]
    dialog = await database_sync_to_async(storage.open_request_dialog)(
        user, "openai", f"{user.pk}.r1", [("user", "a")]
    )
    turn = RequestTurn(user, None, dialog, retire=True)  # type: ignore[arg-type]
    turn.inbox_id = str(uuid.uuid4())  # its message: no longer queued or running
    leaving = asyncio.Event()

    async def slow_close() -> None:  # leaving the chat's group takes a while …
        leaving.set()
        await asyncio.Event().wait()

    turn.follower.close = slow_close  # type: ignore[method-assign]
    ending = asyncio.ensure_future(turn.end(True))
    await leaving.wait()
    ending.cancel()  # … and the client's disconnect cancels the clean-up meanwhile
    with pytest.raises(asyncio.CancelledError):
        await ending
    await follow.drain_abandoned(timeout=10)
    deleted = await database_sync_to_async(lambda: Dialog.objects.get(pk=dialog.id).deleted_at)()
    assert deleted is not None
