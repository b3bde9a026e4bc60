"""parse_event: the message PicoBot answers, or why an event is ignored (FEISHU.md §6)."""

from __future__ import annotations

import json

import pytest

from conversations.feishu.events import FeishuMessageEvent, IgnoredEvent, is_command, parse_event
from tests.conversations.feishu.conftest import GROUP, USER, message_event
from tests.conversations.feishu.fake_server import BOT_OPEN_ID


def parse(body, bot=BOT_OPEN_ID):
    return parse_event(body, bot_open_id=bot)


def test_a_p2p_text_message_becomes_the_message_to_answer():
    event = message_event("om_1", "  What is 2+2?  ", create_time_ms=1_700_000_000_000)
    parsed = parse(event)
    assert isinstance(parsed, FeishuMessageEvent)
    assert (parsed.message_id, parsed.chat_id, parsed.chat_type) == ("om_1", "oc_p2p_chat", "p2p")
    assert parsed.sender_open_id == USER and parsed.text == "What is 2+2?"
    assert parsed.create_time_ms == 1_700_000_000_000 and parsed.image_keys == ()
    assert parsed.event_id == event["header"]["event_id"]


def test_in_a_group_only_a_mention_of_the_bot_counts_and_the_mention_is_stripped():
    assert parse(message_event("om_1", "hi all", chat_id=GROUP, chat_type="group")) == IgnoredEvent(
        "im.message.receive_v1", "a group message that does not mention the bot"
    )
    parsed = parse(
        message_event("om_2", "what time is it?", chat_id=GROUP, chat_type="group", mention_bot=True)
    )
    assert isinstance(parsed, FeishuMessageEvent) and parsed.text == "what time is it?"
    # the bot's identity unknown: no group message is taken as addressed to it
    assert isinstance(
        parse(message_event("om_3", "x", chat_type="group", mention_bot=True), bot=None), IgnoredEvent
    )


def test_other_mentions_are_shown_by_name():
    event = message_event("om_1", "ask @_user_2 please", mention_bot=True)
    event["event"]["message"]["mentions"].append(
        {"key": "@_user_2", "id": {"open_id": "ou_x"}, "name": "Ann"}
    )
    assert parse(event).text == "ask @Ann please"


def test_a_post_gives_its_title_paragraphs_links_code_and_images():
    post = {
        "zh_cn": {
            "title": "Report",
            "content": [
                [{"tag": "text", "text": "see "}, {"tag": "a", "href": "https://x.test/a", "text": "this"}],
                [{"tag": "img", "image_key": "img_1"}],
                [{"tag": "code_block", "language": "PYTHON", "text": "print(1)\n"}],
                [{"tag": "unknown_future_tag", "text": "?"}, {"tag": "emotion", "emoji_type": "SMILE"}],
            ],
        }
    }
    parsed = parse(message_event("om_1", message_type="post", content=post))
    assert parsed.text == "Report\nsee this (https://x.test/a)\n```python\nprint(1)\n```\n:SMILE:"
    assert parsed.image_keys == ("img_1",)


def test_an_image_message_has_its_key_and_no_text():
    parsed = parse(message_event("om_1", message_type="image", content={"image_key": "img_9"}))
    assert parsed.text == "" and parsed.image_keys == ("img_9",)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda e: e["header"].update(event_type="im.chat.member.bot.added_v1"), "event type not handled"),
        (lambda e: e["event"]["message"].update(content="not json"), "content is not JSON"),
        (lambda e: e["event"]["message"].pop("message_id"), "no message_id or chat_id"),
        (lambda e: e["event"]["sender"].update(sender_type="app"), "sender type 'app'"),
        (
            lambda e: e["event"]["message"].update(content=json.dumps({"text": "  "})),
            "nothing to answer (no text, no image)",
        ),
    ],
)
def test_what_is_not_answered_says_why(mutate, reason):
    event = message_event("om_1", "hi")
    mutate(event)
    parsed = parse(event)
    assert isinstance(parsed, IgnoredEvent) and parsed.reason == reason


def test_a_message_type_without_text_is_returned_as_unsupported_so_the_user_is_told():
    event = message_event("om_1", message_type="file", content={"file_key": "f_1", "file_name": "a.pdf"})
    parsed = parse(event)
    assert isinstance(parsed, FeishuMessageEvent) and parsed.unsupported == "file" and parsed.text == ""
    assert parse(message_event("om_2", "hi")).unsupported == ""


@pytest.mark.parametrize("body", [None, [], "x", {"header": "x", "event": 3}, {"event": {"message": []}}])
def test_malformed_bodies_never_raise(body):
    assert isinstance(parse(body), IgnoredEvent)


def test_commands_are_recognised():
    assert is_command("/help") and is_command("  /stop") and not is_command("a /b")
