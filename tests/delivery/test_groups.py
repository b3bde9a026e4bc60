from __future__ import annotations

import pytest
from channels.layers import InMemoryChannelLayer
from hypothesis import given
from hypothesis import strategies as st

from delivery.groups import chat_group


def test_plain_ids_are_readable():
    assert chat_group("cli_chat", "42") == "chat.cli_chat.42"
    assert chat_group("feishu", "oc_abc-123.x") == "chat.feishu.oc_abc-123.x"


@pytest.mark.parametrize(
    "chat_id",
    ["alice@example.com", "用户", "a b", "x" * 200, "", "abc\n", "٣", "_" + "0" * 40],
)
def test_odd_ids_are_hashed_into_valid_names(chat_id):
    name = chat_group("cli_chat", chat_id)
    assert name.startswith("chat.cli_chat._")
    InMemoryChannelLayer().require_valid_group_name(name)


def test_a_raw_id_shaped_like_a_hash_does_not_collide_with_the_hash():
    hashed = chat_group("cli_chat", "alice@example.com")
    raw = hashed.removeprefix("chat.cli_chat.")
    assert chat_group("cli_chat", raw) != hashed


@given(st.text(max_size=12), st.text(max_size=150))
def test_any_input_gives_a_valid_group_name(channel, chat_id):
    InMemoryChannelLayer().require_valid_group_name(chat_group(channel, chat_id))


@given(st.text(max_size=150), st.text(max_size=150))
def test_distinct_chats_get_distinct_groups(a, b):
    if a != b:
        assert chat_group("cli_chat", a) != chat_group("cli_chat", b)
