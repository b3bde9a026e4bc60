"""A streaming client that closes right after ``[DONE]`` cancels the response's clean-up: the
one-request dialog is still retired (issue 18: such requests leave no dialog in the list)."""

from __future__ import annotations

import asyncio
import json
import re
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


def test_a_failed_turn_answers_with_its_own_ref_and_other_server_errors_get_one(rf):
    from conversations.api.openai_compat.request_turn import turn_error
    from conversations.api.openai_compat.views import _error
    from conversations.api.openai_compat.wire import WireError

    request = rf.post("/v1/chat/completions")
    failed = turn_error({"status": "done", "outcome": "failed", "error": "the model broke (ref 3ddf50a3)"})
    body = json.loads(_error(request, failed).content)
    assert body["error"]["message"] == "the turn failed: the model broke (ref 3ddf50a3)"
    other = json.loads(_error(request, WireError(503, "storage is down", code="storage")).content)
    assert re.fullmatch(r"storage is down \(ref [0-9a-f]{8}\)", other["error"]["message"])


def test_a_utf8_dialog_header_is_read_as_utf8():
    from conversations.api.openai_compat.views import _header_text

    assert _header_text("笔记 notes".encode().decode("latin-1")) == "笔记 notes"  # as ASGI hands it over
    assert _header_text("API notes") == "API notes"
    assert _header_text("caf\xe9") == "caf\xe9"  # Latin-1 bytes that are not UTF-8 stay as they came
