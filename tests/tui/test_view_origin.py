"""A user row that no person typed — a scheduled prompt's run, a background task's notification —
names its origin instead of "You" in the terminal client (PROTOCOL §1 ``origin``; issue 18)."""

from __future__ import annotations

import pytest

from tui.view import sender_label


@pytest.mark.parametrize(
    ("origin", "shown"),
    [
        (
            {"kind": "schedule", "ref": "3", "label": "Scheduled (0 9 * * *): Daily news"},
            "⏰ Scheduled (0 9 * * *): Daily news",
        ),
        ({"kind": "task_notification", "ref": "9", "label": ""}, "⚙ Background task"),
        ({"kind": "something_new", "ref": "1", "label": "x"}, "• x"),
        (None, "You"),
        ({}, "You"),
        ("schedule", "You"),
    ],
)
def test_a_user_row_names_who_it_is_from(origin, shown):
    assert sender_label({"role": "user", "content": "hi", "origin": origin}) == shown


def test_a_row_from_an_older_server_without_origin_is_the_user_s():
    assert sender_label({"role": "user", "content": "hi"}) == "You"
