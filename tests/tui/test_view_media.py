"""A user row sent with images shows "[n image(s)]" after its text in the terminal client
(PROTOCOL §1 "History message" ``media``): the store keeps the rows' ``media`` as history and
``turn_committed`` bring them, and ``tui.view.user_text`` counts them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tui.test_store import committed, loaded, row
from tui.view import transcript, user_text


def image(index: int) -> dict[str, Any]:
    return {"mime_type": "image/png", "url": f"/api/dialogs/cli_chat%3A1%3Ad1/messages/m1/media/{index}"}


@pytest.mark.parametrize(
    ("media", "shown"),
    [(None, "look"), ([], "look"), ([image(0)], "look [1 image]"), ([image(0), image(1)], "look [2 images]")],
)
def test_a_user_rows_text_counts_its_images(media, shown):
    extra = {} if media is None else {"media": media}
    assert user_text({"role": "user", "content": "look", **extra}) == shown


def test_history_and_commits_keep_the_images_that_the_row_view_counts():
    store = loaded(row(1, content="look", media=[image(0), image(1)]), row(2, "assistant", media=[]))
    store.apply(committed(row(3, turn_id="t2", content="again", media=[image(0)])))
    users = [i.data for i in transcript(store) if i.kind == "row" and i.data["role"] == "user"]
    assert [user_text(r) for r in users] == ["look [2 images]", "again [1 image]"]
