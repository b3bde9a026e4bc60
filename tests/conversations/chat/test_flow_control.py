"""The ``seen`` credit window per connection (PROTOCOL §1 "Flow control").

Daphne has no WebSocket backpressure, so the window is what bounds a slow client's memory. The
bound is asserted through the consumer's own state (its ``SnapshotCreditWindow``) and the frames
queued towards the client, never through wall-clock timing.
"""

from __future__ import annotations

import pytest

from conversations.chat.consumer import ChatConsumer
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

WINDOW = 4


@pytest.fixture
def consumers(monkeypatch) -> list[ChatConsumer]:
    """Every ChatConsumer instance the test's connections create, in connection order."""
    instances: list[ChatConsumer] = []
    original = ChatConsumer.websocket_connect

    async def capture(self: ChatConsumer, message: dict) -> None:
        instances.append(self)
        await original(self, message)

    monkeypatch.setattr(ChatConsumer, "websocket_connect", capture)
    return instances


async def test_a_silent_connection_holds_at_most_the_window_while_a_reading_one_streams_on(
    connect, start_worker, consumers
):
    words = " ".join(f"w{i}" for i in range(400))
    await start_worker(ScriptedProvider([script_text(words)], delay=0.005))
    token = await make_token()
    reader = await connect(token)
    await reader.until("ready")
    silent = await connect(token)
    await silent.until("ready")  # before the turn; from here on it reads nothing until the end
    silent_consumer = consumers[1]
    assert silent_consumer.window.limit == WINDOW

    await reader.send({"type": "message", "content": "talk", "client_msg_id": "fc-1"})
    outstanding, queued = [], []
    while True:
        turn = (await reader.until("turn_updated"))["turn"]
        # What the server holds for the silent client right now: running frames sent and not
        # acknowledged plus the one pending in its window; and the frames queued on its socket.
        outstanding.append(silent_consumer.window.outstanding(turn["id"]))
        queued.append(silent.communicator.output_queue.qsize())
        if turn["status"] != "running":
            break
        await reader.send({"type": "seen", "turn_id": turn["id"], "revision": turn["revision"]})
    await reader.until("turn_committed")
    final_revision = turn["revision"]

    # The silent client reads only now.
    await silent.until("turn_committed")
    silent_updates = [f["turn"] for f in silent.of_type("turn_updated")]
    silent_running = [t for t in silent_updates if t["status"] == "running"]
    assert len(silent_running) <= WINDOW
    assert [t["revision"] for t in silent_updates if t["status"] != "running"] == [final_revision]
    assert silent_updates[-1]["status"] == "completed"
    assert silent_updates[-1]["blocks"][-1]["text"] == words

    assert max(outstanding) <= WINDOW + 1
    assert silent_consumer.window.peak_outstanding == WINDOW + 1, "the window did fill up"
    # Never more than the window's running frames + the terminal + turn_committed on its socket.
    assert max(queued) <= WINDOW + 2

    reader_running = [f["turn"] for f in reader.of_type("turn_updated") if f["turn"]["status"] == "running"]
    revisions = [t["revision"] for t in reader_running]
    assert revisions == sorted(set(revisions))
    assert len(reader_running) > 3 * WINDOW, "credit keeps coming back for the reading client"
    newest_silent = max(t["revision"] for t in silent_running)
    later = [t for t in reader_running if t["revision"] > newest_silent]
    assert len(later) > WINDOW, "the reader keeps receiving after the silent client's window filled"
    assert consumers[0].window.peak_outstanding <= WINDOW + 1
