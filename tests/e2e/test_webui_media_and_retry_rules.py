"""The WebUI's client rules for a message's images and a spent Retry, with no DOM (protocol.js,
viewmodel.js), in Chromium: history rows' ``media`` URLs become thumbnails and full-size links, a
message this page sent keeps the thumbnails it showed while pending, and a failed turn's Retry is
"Retried" once a later message carries its text (also after a reload)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_webui_client_rules import READY, A, history, row, run

pytestmark = pytest.mark.e2e

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
URL = "/api/dialogs/cli_chat%3A1%3Aaaaa1111/messages/m1/media/0"


async def test_history_media_become_thumbnails_linking_to_the_full_image(page: Any) -> None:
    rows = [
        row(
            1,
            "user",
            "t1",
            media=[{"mime_type": "image/png", "url": URL}, {"mime_type": "image/gif", "url": "javascript:x"}],
        ),
        row(2, "assistant", "t1", media=[]),
        row(3, "user", "t2", media=[]),
    ]
    users = await run(
        page,
        """([ready, hist]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          return s.viewItems().filter((i) => i.kind === 'user').map((i) => i.media);
        }""",
        [READY, history(A, *rows)],
    )
    assert users == [[{"src": URL, "href": URL}], None], "only the server's own URLs are used"


async def test_a_sent_message_keeps_its_own_thumbnails_at_commit_and_gains_the_link(page: Any) -> None:
    media = await run(
        page,
        """([ready, hist, png, url]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          const frame = s.addPending('look', [{ mime_type: 'image/png', data: png }]);
          const pending = s.viewItems().find((i) => i.kind === 'user').media;
          s.apply({ type: 'ack', client_msg_id: frame.client_msg_id, message_id: 'm1', session_id: hist.session_id, queued: 0 });
          const user = { id: 'm1', seq: 1, role: 'user', content: 'look', turn_id: 't1', created_at: 1,
                         media: [{ mime_type: 'image/png', url }] };
          s.apply({ type: 'turn_committed', session_id: hist.session_id, history_revision: 1, messages: [user] });
          const committed = s.viewItems().find((i) => i.kind === 'user');
          return [pending, committed.media, committed.key === 'u:' + frame.client_msg_id];
        }""",
        [READY, history(A), PNG, URL],
    )
    pending, committed, same_key = media
    assert pending == [{"src": f"data:image/png;base64,{PNG}", "href": None}]
    assert committed == [{"src": f"data:image/png;base64,{PNG}", "href": URL}], "no reload of the thumbnail"
    assert same_key


async def test_a_failed_turns_retry_is_spent_once_its_text_is_sent_again_also_after_a_reload(
    page: Any,
) -> None:
    failed = {"status": "failed", "error": "the model provider could not be reached"}
    states = await run(
        page,
        """([ready, hist, reloaded]) => {
          const retry = (s) => s.viewItems().filter((i) => i.kind === 'turn').map((i) => [i.key, i.turn.canRetry, i.turn.retried]);
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          const before = retry(s);
          s.retryTurn('t1');
          const after = retry(s);
          const fresh = new PicoBot.ChatStore();
          fresh.apply(ready); fresh.apply(reloaded);
          return [before, after, retry(fresh)];
        }""",
        [
            READY,
            history(A, row(1, "user", "t1", content="hello?", outcome=failed)),
            history(
                A,
                row(1, "user", "t1", content="hello?", outcome=failed),
                row(2, "user", "t2", content="hello?"),
                row(3, "assistant", "t2", content="Hi!"),
            ),
        ],
    )
    before, after, reloaded = states
    assert before == [["t:t1", True, False]]
    assert after == [["t:t1", False, True]], "the Retry is used: it says Retried"
    assert reloaded == [["t:t1", False, True], ["t:t2", False, False]]
