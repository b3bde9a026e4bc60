"""Dialog lifecycle in storage (seed 004 §6, DESIGN §6): idle reset, rename, soft delete (during a
turn too: it ends the lease generation and the started row), info, and inbound fidelity (seed 000
§10) — plus the idle reset as a cli_chat client sees it."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.agent.inbound import InboundMessage, ReplyTo
from conversations.auth import get_or_create_user
from conversations.models import ChatState, Dialog, InboxMessage, Message, now_ms
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

CHANNEL = "cli_chat"
HOUR_MS = 3_600_000


@pytest.fixture
def alice():
    return get_or_create_user("alice")[0]


@pytest.fixture
def bob():
    return get_or_create_user("bob")[0]


def age(dialog: Dialog, hours: float, *, messages: int = 1) -> None:
    """Pretend the dialog has ``messages`` user messages and was last active (and chosen) ``hours`` ago."""
    then = now_ms() - int(hours * HOUR_MS)
    Dialog.objects.filter(pk=dialog.pk).update(last_active_at=then, message_count=messages)
    ChatState.objects.filter(channel=dialog.channel, chat_id=dialog.chat_id).update(updated_at=then)


def run_one_turn(dialog: Dialog) -> None:
    epoch = storage.claim_lease(dialog.id, "w", 15_000)
    turn = storage.start_next_turn(dialog.id, "w", epoch)
    storage.commit_turn(dialog.id, "w", epoch, turn.inbox_id, [{"role": "assistant", "content": "ok"}])
    storage.release_lease(dialog.id, "w", epoch)


# --- idle reset (DESIGN §6) ---------------------------------------------------------------------


@pytest.mark.django_db
def test_an_active_dialog_idle_past_the_ttl_is_replaced_on_the_next_message(alice, settings):
    settings.PICOBOT = settings.PICOBOT.replace(session_ttl_hours=24)
    old = storage.active_dialog(alice, CHANNEL, "c")
    age(old, 25)
    accepted = storage.accept_message(alice, CHANNEL, "c", "back again")
    assert accepted.created_dialog is not None and accepted.replaced_dialog.pk == old.pk
    assert accepted.session_id == accepted.created_dialog.id != old.id
    assert ChatState.objects.get(chat_id="c").active_dialog_id == accepted.session_id
    assert {d["session_id"] for d in storage.list_sessions(alice, CHANNEL, "c")} == {
        old.id,
        accepted.session_id,
    }
    # The next message stays in the new dialog.
    again = storage.accept_message(alice, CHANNEL, "c", "and again")
    assert again.session_id == accepted.session_id and again.created_dialog is None


@pytest.mark.django_db
def test_switching_back_to_an_idle_dialog_continues_it(alice, settings):
    """QA finding: /switch to the old dialog must not be undone by another idle reset."""
    settings.PICOBOT = settings.PICOBOT.replace(session_ttl_hours=1)
    old = storage.active_dialog(alice, CHANNEL, "c")
    age(old, 5)
    new = storage.accept_message(alice, CHANNEL, "c", "after a break").session_id
    assert new != old.id
    storage.switch_dialog(alice, CHANNEL, "c", old.dialog_id)
    back = storage.accept_message(alice, CHANNEL, "c", "continue the old one")
    assert (back.session_id, back.created_dialog) == (old.id, None)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("ttl_hours", "idle_hours", "messages", "replaced"),
    [(24, 23, 1, False), (24, 25, 0, False), (0, 10_000, 5, False), (1, 2, 3, True)],
    ids=["inside-ttl", "empty-dialog", "ttl-0-never", "short-ttl"],
)
def test_idle_reset_rules(alice, settings, ttl_hours, idle_hours, messages, replaced):
    settings.PICOBOT = settings.PICOBOT.replace(session_ttl_hours=ttl_hours)
    old = storage.active_dialog(alice, CHANNEL, "c")
    age(old, idle_hours, messages=messages)
    accepted = storage.accept_message(alice, CHANNEL, "c", "hi")
    assert (accepted.session_id != old.id) is replaced


@pytest.mark.django_db
def test_an_explicit_session_id_or_a_busy_dialog_is_never_reset(alice, settings):
    settings.PICOBOT = settings.PICOBOT.replace(session_ttl_hours=1)
    old = storage.active_dialog(alice, CHANNEL, "c")
    age(old, 5)
    assert storage.accept_message(alice, CHANNEL, "c", "to it", session_id=old.id).session_id == old.id
    # It now has a queued message: the chat's next message joins it instead of resetting.
    age(old, 5)
    assert storage.accept_message(alice, CHANNEL, "c", "more").session_id == old.id


# --- rename, delete, info -------------------------------------------------------------------------


@pytest.mark.django_db
def test_rename_is_a_user_title(alice, bob):
    dialog = storage.active_dialog(alice, CHANNEL, "c")
    renamed = storage.rename_dialog(alice, dialog.id, "  Quarterly\tplan  ")
    row = Dialog.objects.get(pk=dialog.pk)
    assert (renamed.title, row.title, row.title_is_default) == ("Quarterly plan", "Quarterly plan", False)
    with pytest.raises(storage.NotFoundError):
        storage.rename_dialog(bob, dialog.id, "stolen")
    for bad in ("", "   ", "x" * 201, "bell\x07"):
        with pytest.raises(ValueError):
            storage.rename_dialog(alice, dialog.id, bad)
    assert Dialog.objects.get(pk=dialog.pk).title == "Quarterly plan"


@pytest.mark.django_db
def test_delete_soft_deletes_drops_queued_and_picks_the_most_recent_other(alice, bob):
    first = storage.active_dialog(alice, CHANNEL, "c")
    second = storage.create_dialog(alice, CHANNEL, "c", "second")
    third = storage.create_dialog(alice, CHANNEL, "c", "third")
    Dialog.objects.filter(pk=first.pk).update(last_active_at=now_ms() + 5)  # most recent after third
    storage.accept_message(alice, CHANNEL, "c", "queued", session_id=third.id)

    result = storage.delete_dialog(alice, CHANNEL, "c", third.id)

    assert (result.active.pk, result.active_changed, result.active_created) == (first.pk, True, False)
    assert result.dropped_queued == 1 and result.running_turn is False
    assert Dialog.objects.get(pk=third.pk).deleted_at is not None
    assert InboxMessage.objects.get(dialog_id=third.pk).status == InboxMessage.Status.DONE
    assert storage.dialogs_needing_work("w") == []
    with pytest.raises(storage.NotFoundError):
        storage.history_page(alice, third.id)
    with pytest.raises(storage.NotFoundError):
        storage.delete_dialog(alice, CHANNEL, "c", third.id)
    with pytest.raises(storage.NotFoundError):
        storage.delete_dialog(bob, CHANNEL, "c", first.id)
    # Deleting a dialog that is not the active one keeps the active one.
    kept = storage.delete_dialog(alice, CHANNEL, "c", second.id)
    assert (kept.active.pk, kept.active_changed) == (first.pk, False)
    # Deleting the last one leaves a new empty active dialog.
    last = storage.delete_dialog(alice, CHANNEL, "c", first.id)
    assert last.active_created and last.active.message_count == 0
    assert storage.active_dialog(alice, CHANNEL, "c").pk == last.active.pk


def started_turn(worker_id: str = "w1") -> tuple[Dialog, int]:
    owner = get_or_create_user("alice")[0]
    dialog = storage.active_dialog(owner, "cli_chat", str(owner.pk))
    storage.accept_message(owner, "cli_chat", str(owner.pk), "running", client_msg_id="del-1")
    storage.accept_message(owner, "cli_chat", str(owner.pk), "queued", client_msg_id="del-2")
    epoch = storage.claim_lease(dialog.id, worker_id, 60_000)
    storage.start_next_turn(dialog.id, worker_id, epoch)
    return dialog, epoch


@pytest.mark.django_db(transaction=True)
def test_deleting_a_dialog_ends_its_lease_generation_and_its_started_row():
    dialog, epoch = started_turn()
    owner = dialog.owner
    result = storage.delete_dialog(owner, "cli_chat", str(owner.pk), dialog.id)
    assert result.running_turn and result.dropped_queued == 1
    assert storage.renew_worker_leases("w1", 60_000) == 0
    assert storage.lease_epochs([dialog.id])[dialog.id] != ("w1", epoch), "the keeper sees the loss"
    with pytest.raises(storage.LeaseLostError):
        storage.commit_turn(dialog.id, "w1", epoch, "x", [])
    assert storage.claim_lease(dialog.id, "w1", 60_000) is None
    assert storage.dialogs_needing_work("w1") == []
    rows = list(InboxMessage.objects.order_by("position").values_list("status", "error", "notice_sent_at"))
    assert [(s, e) for s, e, _ in rows] == [("done", "the dialog was deleted")] * 2
    assert rows[0][2] is not None, "no 'interrupted by a restart' notice for it, ever"
    assert storage.pending_interrupted_notices("cli_chat", str(owner.pk)) == []


@pytest.mark.django_db
def test_a_row_of_the_same_chat_id_but_another_owner_never_becomes_the_active_dialog(alice, bob):
    # An ownerless imported row and bob's row share alice's chat id (an import without --user, a
    # reused user id): neither may become alice's active dialog, on first contact or after a delete.
    orphan = storage.create_dialog(None, CHANNEL, "c", "imported")
    foreign = storage.create_dialog(bob, CHANNEL, "c", "bob's")
    Dialog.objects.filter(pk__in=[orphan.pk, foreign.pk]).update(last_active_at=now_ms() + 60_000)

    mine = storage.active_dialog(alice, CHANNEL, "c")
    assert mine.pk not in (orphan.pk, foreign.pk) and mine.owner_id == alice.pk

    # Even a chat state that points at a foreign row is not followed.
    ChatState.objects.filter(channel=CHANNEL, chat_id="c").update(active_dialog=foreign)
    assert storage.resolve_dialog(alice, CHANNEL, "c").dialog.pk == mine.pk

    result = storage.delete_dialog(alice, CHANNEL, "c", mine.id)
    assert result.active_created and result.active.owner_id == alice.pk
    assert result.active.pk not in (orphan.pk, foreign.pk)


@pytest.mark.django_db
def test_info_counts_usage_and_state(alice, bob):
    dialog = storage.active_dialog(alice, CHANNEL, "c")
    storage.accept_message(alice, CHANNEL, "c", "hello")
    run_one_turn(dialog)
    storage.accept_message(alice, CHANNEL, "c", "queued one")
    info = storage.dialog_info(alice, dialog.id)
    assert info["session_id"] == dialog.id and info["dialog_id"] == dialog.dialog_id
    assert (info["message_count"], info["total_message_count"], info["history_revision"]) == (1, 2, 2)
    assert (info["queued"], info["running"], info["active"]) == (1, False, True)
    assert set(info["usage"]) == {"calls", "input_tokens", "output_tokens", "cached_tokens", "cost"}
    assert info["created_at"] <= info["last_active_at"]
    with pytest.raises(storage.NotFoundError):
        storage.dialog_info(bob, dialog.id)


# --- inbound fidelity (seed 000 §10) ----------------------------------------------------------------


@pytest.mark.django_db
def test_inbound_sender_time_reply_to_and_context_are_kept_but_not_shown(alice):
    dialog = storage.active_dialog(alice, "feishu", "oc_1")
    inbound = InboundMessage(
        channel="feishu",
        chat_id="oc_1",
        sender_id="ou_secret_sender",
        content="see above",
        received_at=1_700_000_000_123,
        reply_to=ReplyTo("om_parent", "the quoted text"),
        channel_context={"feishu.message_id": "om_1", "anything": [1, 2]},
        client_msg_id="ev-1",
    )
    accepted = storage.accept_inbound(alice, inbound)
    inbox = InboxMessage.objects.get(pk=accepted.inbox_id)
    assert inbox.channel_context == {"feishu.message_id": "om_1", "anything": [1, 2]}
    run_one_turn(dialog)
    user_row = Message.objects.get(pk=accepted.inbox_id)
    assert user_row.created_at == 1_700_000_000_123
    assert user_row.source == {
        "kind": "user_input",
        "from_channel": "feishu",
        "from_user_id": "ou_secret_sender",
        "reply_to": {"message_id": "om_parent", "excerpt": "the quoted text"},
    }
    page = storage.history_page(alice, dialog.id)
    assert "ou_secret_sender" not in str(page) and "source" not in page["messages"][0]


# --- the idle reset as a client sees it -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_the_client_is_told_about_an_idle_reset_before_the_ack(connect, start_worker, settings):
    settings.PICOBOT = settings.PICOBOT.replace(session_ttl_hours=24)
    await start_worker(ScriptedProvider([script_text("first"), script_text("fresh start")]))
    client = await connect(await make_token())
    ready = await client.until("ready")
    old = ready["active_session_id"]
    await client.send({"type": "message", "content": "hello", "client_msg_id": "ir-1"})
    await client.until("turn_committed")

    @database_sync_to_async
    def make_idle() -> None:
        age(Dialog.objects.get(pk=old), 25)

    await make_idle()
    await client.send({"type": "message", "content": "back after a while", "client_msg_id": "ir-2"})
    changed = await client.until("session_changed")
    notice = await client.until("notification")
    welcome = await client.until("notification")
    ack = await client.until("ack")
    assert changed["active"] is True and changed["session_id"] != old
    assert "idle" in notice["content"] and old.rsplit(":", 1)[-1] in notice["content"]
    assert welcome["session_id"] == changed["session_id"] == ack["session_id"]
    committed = await client.until("turn_committed")
    assert committed["session_id"] == changed["session_id"]
    assert [m["content"] for m in committed["messages"]] == ["back after a while", "fresh start"]


@pytest.mark.django_db(transaction=True)
async def test_the_channel_context_reaches_the_turns_sink_untouched(start_worker):
    """Seed 000 §10.1: the opaque context goes to the turn's sink; the core never reads it."""
    from conversations.runtime.agent_channel import wake_dialog
    from conversations.runtime.turn_sinks import open_cli_chat_sink

    opened: list[storage.TurnStart] = []
    sink_opened = asyncio.Event()

    async def sink_factory(start: storage.TurnStart):
        opened.append(start)
        sink_opened.set()
        return await open_cli_chat_sink(start)

    await start_worker(ScriptedProvider([script_text("ok")]), sink_factory=sink_factory)
    user = await database_sync_to_async(lambda: get_or_create_user("carol")[0])()
    context = {"feishu.message_id": "om_9", "thread": {"root": "om_1"}}
    inbound = InboundMessage("feishu", "oc_9", "ou_1", "hi", received_at=now_ms(), channel_context=context)
    accepted = await database_sync_to_async(storage.accept_inbound)(user, inbound)
    await wake_dialog(accepted.session_id)
    await asyncio.wait_for(sink_opened.wait(), 10)
    assert opened[0].channel_context == context
    assert opened[0].channel == "feishu" and opened[0].chat_id == "oc_9"


@pytest.mark.django_db
def test_a_summary_for_a_dialog_deleted_meanwhile_is_not_found_not_a_lost_race(alice):
    """QA finding: /compact then /delete must not answer "another compaction finished first"."""
    dialog = storage.active_dialog(alice, CHANNEL, "c")
    for text in ("one", "two"):
        storage.accept_message(alice, CHANNEL, "c", text)
        run_one_turn(dialog)
    storage.delete_dialog(alice, CHANNEL, "c", dialog.id)
    with pytest.raises(storage.NotFoundError):
        storage.commit_summary(dialog.id, "summary", 2, 0)
    live = storage.create_dialog(alice, CHANNEL, "c")
    storage.accept_message(alice, CHANNEL, "c", "three")
    run_one_turn(live)
    assert storage.commit_summary(live.id, "first", 1, 0) is True
    assert storage.commit_summary(live.id, "second", 2, 0) is False, "a concurrent compaction won"
