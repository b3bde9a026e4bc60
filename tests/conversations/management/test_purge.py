"""``manage.py purge`` (the dry run changes nothing; DESIGN §3, §6 rules)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from conversations.models import ChatState, Dialog, InboxMessage, Message, Plan, now_ms
from delivery.models import DeliveryFailure
from tests.conversations.dialogs import make_dialog

pytestmark = [pytest.mark.django_db]
DAY = 86_400_000


@pytest.fixture
def world():
    """Dialogs of every kind purge must tell apart."""
    alice = get_user_model().objects.create_user("alice")
    now = now_ms()
    made = {
        "deleted_40d": make_dialog(alice, deleted_at=now - 40 * DAY, last_active_at=now - 41 * DAY),
        "deleted_5d": make_dialog(alice, deleted_at=now - 5 * DAY, last_active_at=now - 6 * DAY),
        "inactive_100d": make_dialog(alice, last_active_at=now - 100 * DAY, active=True),
        "recent": make_dialog(alice, last_active_at=now - DAY),
        "deleted_old_but_queued": make_dialog(alice, deleted_at=now - 60 * DAY),
        "inactive_but_running": make_dialog(alice, last_active_at=now - 200 * DAY),
        "inactive_but_leased": make_dialog(
            alice,
            last_active_at=now - 200 * DAY,
            lease_owner="w1",
            lease_epoch=3,
            lease_expires_at=now + 15_000,
        ),
    }
    InboxMessage.objects.create(dialog=made["deleted_old_but_queued"], position=1, content="q", user=alice)
    InboxMessage.objects.create(
        dialog=made["inactive_but_running"],
        position=1,
        content="r",
        user=alice,
        status=InboxMessage.Status.STARTED,
    )
    InboxMessage.objects.create(
        dialog=made["deleted_40d"], position=1, content="done", user=alice, status=InboxMessage.Status.DONE
    )
    return made


def snapshot() -> tuple:
    return (
        sorted(Dialog.objects.values_list("pk", "deleted_at", "last_active_at", "state_version")),
        Message.objects.count(),
        InboxMessage.objects.count(),
        Plan.objects.count(),
        list(ChatState.objects.values_list("active_dialog_id", flat=True)),
    )


def purge(*args: str) -> str:
    out = StringIO()
    call_command("purge", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def remaining() -> set[str]:
    return set(Dialog.objects.values_list("pk", flat=True))


@pytest.mark.parametrize("args", [(), ("--dry-run",), ("--retention-days", "0", "--inactive-days", "2")])
def test_a_dry_run_changes_nothing_and_lists_what_would_go(world, args):
    before = snapshot()
    text = purge(*args)
    assert snapshot() == before
    assert text.startswith("Dry run: nothing is deleted (add --apply to delete).")
    assert f"would purge {world['deleted_40d'].pk}" in text
    assert world["deleted_old_but_queued"].pk not in text and world["recent"].pk not in text


def test_the_default_dry_run_counts_dialogs_messages_and_busy_skips(world):
    text = purge()
    assert "Would purge 1 dialog(s) with 5 message(s); skipped 1 busy dialog(s)" in text


def test_apply_removes_soft_deleted_dialogs_past_the_retention_with_their_rows(world):
    gone = world["deleted_40d"]
    for dialog in (gone, world["recent"]):
        DeliveryFailure.objects.create(
            channel="cli_chat",
            chat_id=dialog.chat_id,
            dialog_id=dialog.pk,
            stage="finish",
            created_at=now_ms(),
        )
    text = purge("--apply")
    assert list(DeliveryFailure.objects.values_list("dialog_id", flat=True)) == [world["recent"].pk]
    assert "Purged 1 dialog(s) with 5 message(s)" in text
    assert gone.pk not in remaining()
    assert not Message.objects.filter(dialog_id=gone.pk).exists()
    assert not InboxMessage.objects.filter(dialog_id=gone.pk).exists()
    assert not Plan.objects.filter(dialog_id=gone.pk).exists()
    assert remaining() == {d.pk for name, d in world.items() if name != "deleted_40d"}


def test_retention_zero_takes_every_soft_deleted_dialog_but_never_a_busy_one(world):
    purge("--retention-days", "0", "--apply")
    assert remaining() == {
        world[n].pk
        for n in (
            "inactive_100d",
            "recent",
            "deleted_old_but_queued",
            "inactive_but_running",
            "inactive_but_leased",
        )
    }


def test_inactive_days_also_takes_old_live_dialogs_and_frees_the_chat(world):
    text = purge("--inactive-days", "90", "--apply")
    assert "skipped 3 busy dialog(s)" in text
    assert remaining() == {
        world[n].pk
        for n in (
            "deleted_5d",
            "recent",
            "deleted_old_but_queued",
            "inactive_but_running",
            "inactive_but_leased",
        )
    }
    # The chat whose active dialog was purged gets a live one on its next message.
    assert ChatState.objects.get().active_dialog is None


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--apply", "--dry-run"), "not allowed with argument"),
        (("--retention-days", "-1"), "--retention-days: must be a whole number from 0 to 36500, got '-1'"),
        (("--inactive-days", "0"), "--inactive-days: must be a whole number from 1 to 36500, got '0'"),
        (("--retention-days", "ten"), "--retention-days: must be a whole number from 0 to 36500, got 'ten'"),
        # Past any date a database integer holds (a traceback before), and digits int() alone reads.
        (("--retention-days", "9" * 30), "--retention-days: must be a whole number from 0 to 36500"),
        (("--inactive-days", "1" + "0" * 20), "--inactive-days: must be a whole number from 1 to 36500"),
        (("--inactive-days", "٣"), "--inactive-days: must be a whole number from 1 to 36500, got '٣'"),
        (("--user", "nobody"), "no user 'nobody'"),
    ],
)
def test_bad_options_are_command_errors(world, args, error):
    before = snapshot()
    with pytest.raises(CommandError, match=error):
        purge(*args)
    assert snapshot() == before
