"""A message may be images alone (PROTOCOL §1 ``message``: ``content`` may be empty when
``media`` is present): it is acked, answered, kept in history with its images, and the model gets
the images without an empty text part; without media a blank message is still refused."""

from __future__ import annotations

import pytest

from providers.blocks import ImageBlock, TextBlock
from providers.messages import Message
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
MEDIA = [{"mime_type": "image/png", "data": PNG}]


@pytest.mark.parametrize("content", ["", "  \n ", None])
async def test_images_without_text_are_sent_answered_and_kept(connect, start_worker, content):
    provider = ScriptedProvider([script_text("A tiny picture.")])
    await start_worker(provider)
    client = await connect(await make_token())
    await client.until("ready")
    frame = {"type": "message", "client_msg_id": "only-images", "media": MEDIA}
    if content is not None:
        frame["content"] = content
    await client.send(frame)
    ack = await client.until("ack")
    committed = await client.until("turn_committed")

    user, answer = committed["messages"]
    assert user["id"] == ack["message_id"] and user["content"] == ""
    assert [m["mime_type"] for m in user["media"]] == ["image/png"]
    assert answer["content"] == "A tiny picture."
    sent: Message = [m for m in provider.requests[0].messages if m.role == "user"][-1]
    images = [b for b in sent.content if isinstance(b, ImageBlock)]
    texts = [b.text for b in sent.content if isinstance(b, TextBlock)]
    assert [i.data for i in images] == [PNG]
    assert all(t.strip() for t in texts), "no empty text part next to the image"


@pytest.mark.parametrize("extra", [{}, {"media": []}])
async def test_a_blank_message_without_images_is_still_refused(connect, extra):
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "  ", "client_msg_id": "blank", **extra})
    error = await client.until("error")
    assert error["code"] == "invalid_frame" and error["client_msg_id"] == "blank"
