"""Admin list pages stay fast on 100 000 messages: a bounded number of
queries per page — no query per row — and no big columns (provider state, media) read."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.models import ChatState, Dialog, Message

pytestmark = [pytest.mark.django_db]

TOTAL = 100_000
BIG = 10_000  # one dialog holds 10 000 rows
OTHERS = 90  # the rest spread over 90 dialogs of 1 000


def _rows(dialog: Dialog, size: int) -> list[Message]:
    state = {"provider": "openai", "signature": "S" * 200}
    rows = []
    for seq in range(1, size + 1):
        role = ("user", "assistant", "tool")[seq % 3]
        rows.append(
            Message(
                id=uuid.uuid4(),
                dialog=dialog,
                seq=seq,
                role=role,
                content=f"message {seq} of {dialog.dialog_id}",
                reasoning_content="thinking" if role == "assistant" else None,
                provider_state=state if role == "assistant" else None,
                tool_calls=[{"id": f"c{seq}", "name": "current_time", "arguments": {}}]
                if role == "assistant"
                else [],
                tool_call_id=f"c{seq - 1}" if role == "tool" else None,
                tool_name="current_time" if role == "tool" else None,
                created_at=1_700_000_000_000 + seq,
            )
        )
    return rows


def _copy_history(source: Dialog, targets: list[Dialog]) -> None:
    """Copy ``source``'s rows into each target with one INSERT … SELECT per dialog.

    Django's ``bulk_create`` costs ~0.4 ms per row here (per-value preparation, 58-row batches
    on SQLite's 999-parameter limit): 100 000 rows would take ~40 s. Rows made once by
    ``bulk_create`` and copied by the database are the same rows, 10× faster.
    """
    new_id = {"sqlite": "lower(hex(randomblob(16)))", "postgresql": "gen_random_uuid()"}.get(
        connection.vendor
    )
    if new_id is None:  # pragma: no cover - SQLite and PostgreSQL are the supported databases
        for target in targets:
            Message.objects.bulk_create(_rows(target, source.total_message_count), batch_size=2000)
        return
    table = Message._meta.db_table
    columns = [f.column for f in Message._meta.concrete_fields if f.column not in ("id", "dialog_id")]
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    with connection.cursor() as cursor:
        for target in targets:
            cursor.execute(
                f"INSERT INTO {table} (id, dialog_id, {names}) SELECT {new_id}, %s, {names} FROM {table} "
                f"WHERE dialog_id = %s",
                [target.pk, source.pk],
            )


def populate(owner) -> Dialog:
    """100 000 messages: one dialog of 10 000 and 90 of 1 000 (two of them via ``bulk_create``)."""
    dialogs = [
        Dialog(
            id=f"cli_chat:{owner.pk}:d{i:04d}",
            channel="cli_chat",
            chat_id=str(owner.pk),
            dialog_id=f"d{i:04d}",
            owner=owner,
            title=f"Dialog {i}",
            last_active_at=1_700_000_000_000 + i,
        )
        for i in range(OTHERS + 1)
    ]
    Dialog.objects.bulk_create(dialogs)
    big, template, *rest = dialogs
    size = (TOTAL - BIG) // OTHERS
    Message.objects.bulk_create(_rows(big, BIG), batch_size=2000)
    Message.objects.bulk_create(_rows(template, size), batch_size=2000)
    Dialog.objects.filter(pk=big.pk).update(
        total_message_count=BIG, history_revision=BIG, message_count=BIG // 3
    )
    Dialog.objects.exclude(pk=big.pk).update(
        total_message_count=size, history_revision=size, message_count=size // 3
    )
    template.total_message_count = size
    _copy_history(template, rest)
    ChatState.objects.create(channel="cli_chat", chat_id=str(owner.pk), owner=owner, active_dialog=big)
    return big


def test_admin_pages_run_a_bounded_number_of_queries_on_100k_messages(
    admin_client, admin_user, django_assert_max_num_queries
):
    big = populate(admin_user)
    assert Message.objects.count() == TOTAL

    pages = {
        "message list": "/admin/conversations/message/",
        "message list, page 500": "/admin/conversations/message/?p=500",
        "message list of one dialog": f"/admin/conversations/message/?dialog__id__exact={big.pk}",
        "message search": "/admin/conversations/message/?q=message+9999",
        "dialog list": "/admin/conversations/dialog/",
        "dialog list, active filter": "/admin/conversations/dialog/?active=yes&deleted=no",
        "dialog content search": "/admin/conversations/dialog/?q=message+9999+of",
        "dialog page (capped history)": f"/admin/conversations/dialog/{big.pk}/change/",
        "dialog page, last window": f"/admin/conversations/dialog/{big.pk}/change/?history_from=9801",
    }
    for name, url in pages.items():
        limit = 10 if name.startswith("dialog page") else 8
        with django_assert_max_num_queries(limit), CaptureQueriesContext(connection) as captured:
            response = admin_client.get(url)
        assert response.status_code == 200, name
        sql = " ".join(q["sql"] for q in captured.captured_queries)
        # Big columns stay in the database: list pages and the inline read excerpts only.
        assert '"provider_state"' not in sql and '"media_refs"' not in sql, name
        print(f"{name}: {len(captured.captured_queries)} queries")  # noqa: T201 - the report reads it

    inline = (
        admin_client.get(pages["dialog page (capped history)"]).context["inline_admin_formsets"][0].formset
    )
    assert [m.seq for m in inline.get_queryset()] == list(range(1, 201))
    last = admin_client.get(pages["dialog page, last window"]).context["inline_admin_formsets"][0].formset
    assert [m.seq for m in last.get_queryset()] == list(range(9801, 10001))
    found = admin_client.get(pages["dialog content search"]).context["cl"].result_list
    assert [d.pk for d in found] == [big.pk]
