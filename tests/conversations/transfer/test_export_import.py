"""``manage.py export`` and ``import``: the round trip is exact, bad files are refused whole."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from conversations.models import Dialog, Message, Plan
from conversations.transfer.markdown import markdown_dialog
from conversations.transfer.schema import DIALOG_FIELDS, MESSAGE_FIELDS, validate_document
from providers.json_depth import MAX_JSON_DEPTH
from tests.conversations.dialogs import PNG, make_dialog

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice")


def export(*args: str) -> dict:
    out, err = StringIO(), StringIO()
    call_command("export", *args, stdout=out, stderr=err)
    return json.loads(out.getvalue())


def import_file(path: Path, *args: str) -> list[str]:
    out, err = StringIO(), StringIO()
    call_command("import", str(path), *args, stdout=out, stderr=err)
    return out.getvalue().split()


def without(doc: dict, *keys: str) -> dict:
    doc = copy.deepcopy(doc)
    for key in keys:
        doc.pop(key, None)
    return doc


def test_the_export_covers_every_message_column_and_every_durable_dialog_column():
    message_columns = {f.name for f in Message._meta.concrete_fields} - {"dialog"}
    assert set(MESSAGE_FIELDS) == message_columns
    runtime_only = {
        "owner",
        "lease_owner",
        "lease_epoch",
        "lease_expires_at",
        "inbox_position",
        "compaction_claimed_at",
    }
    assert set(DIALOG_FIELDS) == {f.name for f in Dialog._meta.concrete_fields} - runtime_only


def test_export_then_import_into_an_empty_database_round_trips_exactly(alice, tmp_path):
    dialog = make_dialog(alice, turns=2, summary="Earlier: greetings.", summary_seq=2)
    path = tmp_path / "export.json"
    call_command("export", "--dialog", dialog.pk, "--output", str(path), stderr=StringIO())
    first = json.loads(path.read_text())
    assert first["format"] == "picobot-export" and first["version"] == 1
    exported = first["dialogs"][0]
    assert exported["owner"] == "alice" and exported["plan"]["content"]["steps"][0]["text"] == "check time"
    calls = exported["messages"][1]["tool_calls"]
    assert (
        calls[1]["raw_arguments"] == "{url: nope"
        and exported["messages"][1]["provider_state"]["provider"] == "openai"
    )
    assert exported["messages"][0]["media_refs"][0]["data"] == PNG
    assert exported["messages"][-1]["completion_status"] == "cancelled"

    Dialog.objects.filter(pk=dialog.pk).delete()  # as good as a fresh database for this dialog
    assert not Message.objects.exists() and not Plan.objects.exists()
    assert import_file(path) == [dialog.pk]
    again = export("--dialog", dialog.pk)
    assert without(again, "exported_at") == without(first, "exported_at")


def test_import_as_new_copies_a_dialog_beside_the_original(alice, tmp_path):
    dialog = make_dialog(alice, turns=2)
    path = tmp_path / "export.json"
    call_command("export", "--dialog", dialog.pk, "-o", str(path), stderr=StringIO())
    [new_id] = import_file(path, "--as-new")
    assert new_id != dialog.pk and new_id.startswith(f"cli_chat:{alice.pk}:")
    original = export("--dialog", dialog.pk)["dialogs"][0]
    copied = export("--dialog", new_id)["dialogs"][0]
    assert {m["id"] for m in original["messages"]}.isdisjoint(m["id"] for m in copied["messages"])

    def strip_ids(d: dict) -> dict:
        d = without(d, "id", "dialog_id")
        d["messages"] = [without(m, "id") for m in d["messages"]]
        return d

    assert strip_ids(copied) == strip_ids(original)
    assert Message.objects.count() == 20 and Dialog.objects.count() == 2


def test_an_existing_dialog_without_as_new_is_an_error_and_nothing_is_imported(alice, tmp_path):
    kept = make_dialog(alice, title="already here")
    other = make_dialog(alice, title="second")
    path = tmp_path / "both.json"
    call_command("export", "--user", "alice", "-o", str(path), stderr=StringIO())
    Dialog.objects.filter(pk=other.pk).delete()
    with pytest.raises(CommandError, match=r"already exists.*--as-new"):
        import_file(path)
    # The dialog that did not exist was not imported either: one transaction.
    assert set(Dialog.objects.values_list("pk", flat=True)) == {kept.pk}


def test_a_refused_import_reports_no_dialog_as_imported(alice, tmp_path):
    make_dialog(alice, title="first")
    make_dialog(alice, title="second")
    path = tmp_path / "both.json"
    call_command("export", "--user", "alice", "-o", str(path), stderr=StringIO())
    first, second = (item["id"] for item in json.loads(path.read_text())["dialogs"])
    Dialog.objects.filter(pk=first).delete()  # the first imports, then the second collides
    err = StringIO()
    with pytest.raises(CommandError, match="already exists"):
        call_command("import", str(path), stdout=StringIO(), stderr=err)
    assert "imported" not in err.getvalue(), "nothing was imported: the transaction rolled back"
    assert set(Dialog.objects.values_list("pk", flat=True)) == {second}


def test_export_to_a_reader_that_left_stops_quietly(tmp_path):
    root = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env["PICOBOT_DATA_DIR"] = str(tmp_path)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=root, env=env, check=True, timeout=120)
    seed = "from tests.conversations.dialogs import make_dialog; make_dialog(None, channel='feishu', chat_id='oc_1')"
    subprocess.run([*manage, "shell", "-c", seed], cwd=root, env=env, check=True, timeout=120)
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `export | head` after head exited: every write fails with EPIPE
    try:
        done = subprocess.run(
            [*manage, "export", "--chat", "feishu:oc_1"],
            cwd=root,
            env=env,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_owners_follow_usernames_and_cli_chat_dialogs_move_to_the_new_owners_chat(alice, tmp_path):
    dialog = make_dialog(alice)
    feishu = make_dialog(None, channel="feishu", chat_id="oc_42")
    path = tmp_path / "export.json"
    call_command("export", "--dialog", dialog.pk, "--dialog", feishu.pk, "-o", str(path), stderr=StringIO())
    bob = get_user_model().objects.create_user("bob")
    ids = import_file(path, "--user", "bob", "--as-new")
    moved = Dialog.objects.get(pk=ids[0])
    assert (moved.owner, moved.chat_id) == (bob, str(bob.pk)) and moved.channel == "cli_chat"
    ext = Dialog.objects.get(pk=ids[1])
    assert (ext.owner, ext.chat_id) == (bob, "oc_42")
    Dialog.objects.filter(pk__in=[dialog.pk]).delete()
    alice.delete()
    with pytest.raises(CommandError, match=r"owner 'alice' .* is not a user here"):
        import_file(path)
    with pytest.raises(CommandError, match="no user 'nobody'"):
        import_file(path, "--user", "nobody")


def bad(doc: dict, change) -> dict:
    doc = copy.deepcopy(doc)
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda d: d.update(version=2), r"unsupported export version 2.*newer PicoBot"),
        (lambda d: d.update(format="other"), "not a PicoBot export"),
        (lambda d: d["dialogs"][0].pop("channel"), r"dialogs\[0\]\.channel is required"),
        (
            lambda d: d["dialogs"][0].update(id="x:y:z"),
            r"dialogs\[0\]\.id .* is not channel:chat_id:dialog_id",
        ),
        (
            lambda d: d["dialogs"][0]["messages"][2].update(seq=4),
            r"dialogs\[0\]\.messages\[2\]\.seq must be 3",
        ),
        (lambda d: d["dialogs"][0]["messages"].pop(0), r"messages\[0\]\.seq must be 1"),
        (
            lambda d: d["dialogs"][0]["messages"][0].update(role="system"),
            r"messages\[0\]\.role must be one of",
        ),
        (lambda d: d["dialogs"][0]["messages"][1]["tool_calls"][0].pop("name"), r"tool_calls\[0\]\.name"),
        (
            lambda d: d["dialogs"][0]["messages"][1].update(completion_status="done"),
            "completion_status must be",
        ),
        (lambda d: d["dialogs"][0]["messages"][1].update(created_at="yesterday"), "created_at must be"),
        (lambda d: d["dialogs"][0].update(history_revision=9), "history_revision is 9 but the last seq is 5"),
        (
            lambda d: d["dialogs"][0]["messages"][1].update(id=d["dialogs"][0]["messages"][0]["id"]),
            "appears twice",
        ),
    ],
)
def test_invalid_documents_are_refused_with_the_place_named_and_nothing_imported(
    alice, tmp_path, change, error
):
    dialog = make_dialog(alice)
    doc = export("--dialog", dialog.pk)
    Dialog.objects.all().delete()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad(doc, change)))
    with pytest.raises(CommandError, match=error):
        import_file(path)
    assert not Dialog.objects.exists() and not Message.objects.exists()


def test_unreadable_files_are_clear_errors(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        import_file(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(CommandError, match="is not JSON"):
        import_file(tmp_path / "x.json")


def test_export_selects_by_chat_or_user_and_leaves_soft_deleted_dialogs_out_unless_asked(alice):
    live = make_dialog(alice, title="live")
    gone = make_dialog(alice, title="gone", deleted_at=1_700_000_000_000)
    make_dialog(None, channel="feishu", chat_id="oc_1")
    assert [d["id"] for d in export("--user", "alice")["dialogs"]] == [live.pk]
    assert {d["id"] for d in export("--user", "alice", "--include-deleted")["dialogs"]} == {live.pk, gone.pk}
    assert [d["id"] for d in export("--chat", f"cli_chat:{alice.pk}")["dialogs"]] == [live.pk]
    assert [d["id"] for d in export("--dialog", gone.pk)["dialogs"]] == [gone.pk]
    for args, message in [
        (["--dialog", "cli_chat:1:nope"], "no dialog"),
        (["--chat", "cli_chat"], "CHANNEL:CHAT_ID"),
        (["--chat", "feishu:none"], "no dialogs in chat"),
        (["--user", "nobody"], "no user"),
    ]:
        with pytest.raises(CommandError, match=message):
            export(*args)


def test_markdown_is_a_readable_transcript_without_provider_state_or_media_data(alice):
    dialog = make_dialog(alice, turns=2)
    out = StringIO()
    call_command("export", "--dialog", dialog.pk, "--format", "markdown", stdout=out, stderr=StringIO())
    text = out.getvalue()
    assert text.startswith("# Weather and time")
    assert (
        "<details><summary>Reasoning</summary>\n\n```text\nThe user wants the time; call tools.\n```\n\n</details>"
        in text
    )
    assert '**Tool call** current\\_time (call\\_0\\_a)\n\n```json\n{\n  "tz": "Europe/Paris"\n}\n```' in text
    assert "Arguments (not a JSON object, sent as-is):\n\n```\n{url: nope\n```" in text
    assert "#### Tool result http\\_fetch (call\\_0\\_b)" in text and "**error**" in text
    assert "*cancelled*" in text and "image/png" in text
    assert PNG not in text and "api.example/v1" not in text
    # Content holding a fence gets a longer one, so the transcript stays well-formed.
    assert (
        markdown_dialog({"messages": [{"role": "tool", "seq": 1, "content": "```x```"}]}).count("````") == 2
    )


def test_validate_document_accepts_an_export_and_optional_fields_may_be_left_out(alice, tmp_path):
    dialog = make_dialog(alice)
    doc = export("--dialog", dialog.pk)
    assert validate_document(doc)[0]["id"] == dialog.pk
    minimal = {
        "format": "picobot-export",
        "version": 1,
        "dialogs": [
            {
                "channel": "feishu",
                "chat_id": "oc_9",
                "dialog_id": "abc",
                "messages": [
                    {"seq": 1, "role": "user", "content": "hi"},
                    {"seq": 2, "role": "assistant", "content": "hello"},
                ],
            }
        ],
    }
    path = tmp_path / "minimal.json"
    path.write_text(json.dumps(minimal))
    assert import_file(path) == ["feishu:oc_9:abc"]
    made = Dialog.objects.get(pk="feishu:oc_9:abc")
    assert (made.message_count, made.total_message_count, made.history_revision, made.owner) == (
        1,
        2,
        2,
        None,
    )


def test_import_help_works_although_import_is_a_keyword():
    result = subprocess.run(
        [sys.executable, "manage.py", "import", "--help"],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "--as-new" in result.stdout and "FILE" in result.stdout


def test_import_reads_standard_input_with_a_dash(alice, monkeypatch):
    dialog = make_dialog(alice)
    doc = export("--dialog", dialog.pk)
    Dialog.objects.all().delete()
    monkeypatch.setattr("sys.stdin", StringIO(json.dumps(doc)))
    out = StringIO()
    call_command("import", "-", stdout=out, stderr=StringIO())
    assert out.getvalue().split() == [dialog.pk] and Message.objects.count() == 5


def _msg(i: int) -> Callable[[dict], dict]:
    return lambda d: d["dialogs"][0]["messages"][i]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        # Integers the columns cannot hold, and wrong types, are refused before anything is written.
        (
            lambda d: d["dialogs"][0].update(message_count=2**64),
            r"message_count must be an integer from 0 to 2147483647",
        ),
        (
            lambda d: d["dialogs"][0].update(usage_input_tokens=2**63),
            r"usage_input_tokens must be an integer from 0",
        ),
        (lambda d: _msg(0)(d).update(created_at=2**70), r"messages\[0\]\.created_at must be an integer"),
        (
            lambda d: d["dialogs"][0].update(auto_compact_failures=40_000),
            r"auto_compact_failures .* 0 to 32767",
        ),
        (lambda d: d["dialogs"][0].update(created_at=1.5), r"created_at must be an integer"),
        (lambda d: d["dialogs"][0].update(deleted_at="abc"), r"deleted_at must be an integer .* or null"),
        (lambda d: d["dialogs"][0]["plan"].update(updated_at="abc"), r"plan\.updated_at must be an integer"),
        (lambda d: d.update(exported_at="yesterday"), r"exported_at"),
        # The model's lengths, and the rename rules for titles.
        (
            lambda d: d["dialogs"][0].update(channel="c" * 33, id=None) or d["dialogs"][0].pop("id"),
            r"channel must be \(a non-empty printable string of at most 32",
        ),
        (
            lambda d: d["dialogs"][0].update(chat_id="c" * 129) or d["dialogs"][0].pop("id"),
            r"chat_id must be .* 128",
        ),
        (
            lambda d: d["dialogs"][0].update(dialog_id="d" * 65) or d["dialogs"][0].pop("id"),
            r"dialog_id must be .* 64",
        ),
        (
            lambda d: d["dialogs"][0].update(dialog_id="a\nb") or d["dialogs"][0].pop("id"),
            r"dialog_id must be",
        ),
        (lambda d: d["dialogs"][0].update(model="m" * 201), r"model must be a string of at most 200"),
        (
            lambda d: d["dialogs"][0].update(title="t" * 201),
            r"title must be a non-empty string of at most 200",
        ),
        (lambda d: d["dialogs"][0].update(title=""), r"title must be a non-empty string"),
        (lambda d: d["dialogs"][0].update(title=5), r"title must be a string"),
        (lambda d: d["dialogs"][0].update(title="two\nlines"), r"title must be one line"),
        (lambda d: d["dialogs"][0].update(title=" padded"), r"title must be one line"),
        (
            lambda d: _msg(2)(d).update(tool_call_id="x" * 513),
            r"tool_call_id must be a string of at most 512",
        ),
        (lambda d: _msg(2)(d).update(tool_name="x" * 513), r"tool_name must be a string of at most 512"),
        (lambda d: _msg(1)(d)["tool_calls"][0].update(id="x" * 513), r"tool_calls\[0\]\.id must be .* 512"),
        # Canonical UUID strings only.
        (
            lambda d: _msg(0)(d).update(id="{" + _msg(0)(d)["id"] + "}"),
            r"messages\[0\]\.id must be a UUID string",
        ),
        (
            lambda d: _msg(0)(d).update(id=_msg(0)(d)["id"].upper()),
            r"messages\[0\]\.id must be a UUID string",
        ),
        (
            lambda d: _msg(0)(d).update(turn_id=_msg(0)(d)["turn_id"].replace("-", "")),
            r"turn_id must be a UUID",
        ),
        # Unknown fields are refused (never silently dropped).
        (
            lambda d: d["dialogs"][0].update(lease_owner="evil"),
            r"dialogs\[0\] has unknown field\(s\) 'lease_owner'",
        ),
        (lambda d: _msg(0)(d).update(dialog_id="zzz"), r"messages\[0\] has unknown field\(s\) 'dialog_id'"),
        (lambda d: _msg(1)(d)["tool_calls"][0].update(extra=1), r"tool_calls\[0\] has unknown field"),
        (lambda d: d.update(comment="hi"), r"the document has unknown field\(s\) 'comment'"),
        (lambda d: d["dialogs"][0]["plan"].update(extra=1), r"plan has unknown field"),
        # Plans by the plan tool's rules.
        (lambda d: d["dialogs"][0]["plan"].update(content="abc"), r"plan\.content: a plan is an object"),
        (
            lambda d: d["dialogs"][0]["plan"].update(content={"steps": 5}),
            r"plan\.content: .*not of type 'array'",
        ),
        (
            lambda d: d["dialogs"][0]["plan"].update(content={"steps": [{"text": "a", "status": "later"}]}),
            r"plan\.content: .*status",
        ),
        (
            lambda d: d["dialogs"][0]["plan"].update(
                content={"steps": [{"text": "x" * 301, "status": "done"}]}
            ),
            r"plan\.content: .*",
        ),
        (
            lambda d: d["dialogs"][0]["plan"].update(
                content={"steps": [{"text": "a", "status": "done"}] * 21}
            ),
            r"plan\.content: .*",
        ),
        # Deep nesting and strings no database can store.
        (
            lambda d: _msg(1)(d).update(provider_state=json.loads("[" * 150 + "]" * 150)),
            rf"nests deeper than {MAX_JSON_DEPTH}",
        ),
        (lambda d: _msg(0)(d).update(content="\ud800"), r"not valid Unicode"),
    ],
)
def test_bad_values_are_refused_with_the_place_named_and_nothing_imported(alice, tmp_path, change, error):
    dialog = make_dialog(alice)
    doc = export("--dialog", dialog.pk)
    Dialog.objects.all().delete()
    path = tmp_path / "bad.json"
    changed = bad(doc, change)
    path.write_text(json.dumps(changed, ensure_ascii=True))
    with pytest.raises(CommandError, match="nothing imported: .*" + error):
        import_file(path, "--as-new")
    assert not Dialog.objects.exists() and not Message.objects.exists() and not Plan.objects.exists()


def test_json_nested_too_deeply_to_parse_is_a_clear_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text(
        '{"format": "picobot-export", "version": 1, "dialogs": ' + "[" * 100_000 + "]" * 100_000 + "}"
    )
    with pytest.raises(CommandError, match="nothing imported: .* nests JSON too deeply"):
        import_file(path)


def test_an_ownerless_cli_chat_dialog_needs_user(alice, tmp_path):
    """Its chat id would name whichever user has that id here: another user's chat."""
    dialog = make_dialog(alice)
    doc = export("--dialog", dialog.pk)
    doc["dialogs"][0]["owner"] = None
    Dialog.objects.all().delete()
    path = tmp_path / "ownerless.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CommandError, match=r"cli_chat dialog without an owner.*--user USERNAME"):
        import_file(path)
    assert not Dialog.objects.exists()
    bob = get_user_model().objects.create_user("bob")
    [imported] = import_file(path, "--user", "bob")
    assert (
        Dialog.objects.get(pk=imported).owner == bob and imported == f"cli_chat:{bob.pk}:{dialog.dialog_id}"
    )


def test_a_plan_is_imported_as_the_plan_tool_stores_it(alice, tmp_path):
    dialog = make_dialog(alice)
    doc = export("--dialog", dialog.pk)
    doc["dialogs"][0]["plan"] = {
        "content": {"steps": [{"text": "  check   time ", "status": "done"}]},
        "updated_at": 5,
    }
    Dialog.objects.all().delete()
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    import_file(path)
    plan = Plan.objects.get()
    assert (plan.content, plan.updated_at) == (
        {"steps": [{"text": "check time", "status": "done"}], "note": ""},
        5,
    )


def test_markdown_content_cannot_forge_turns_headings_or_html():
    evil = "\n".join(
        [
            "hi",
            "",
            "## Assistant · #2 · 2024-01-01 00:00:00 UTC",
            "",
            "I will reveal secrets",
            "```",
            "````",
            "</details>",
            "<script>alert(1)</script>",
            "# Owned",
            "> quoted",
            "![x](http://evil.example/p.png)",
        ]
    )
    item = {
        "title": "Trip <b>plans</b>\n## Assistant",
        "id": "cli_chat:1:ab",
        "owner": "al_ice",
        "summary": "sum </details> <img src=x>",
        "summary_seq": 2,
        "messages": [
            {"role": "user", "seq": 1, "content": evil},
            {
                "role": "assistant",
                "seq": 2,
                "content": "ok",
                "reasoning_content": "think </details>\n## User",
                "tool_calls": [{"id": "c`1\n## x", "name": "n<b>", "arguments": {"a": "</details>"}}],
            },
            {"role": "tool", "seq": 3, "content": evil, "tool_name": "t\n# h", "tool_call_id": "`x`"},
        ],
    }
    text = markdown_dialog(item)
    outside = _outside_fences(text)  # what a Markdown renderer interprets
    headings = [line for line in outside.split("\n") if line.startswith("#")]
    assert headings == [
        "# Trip &lt;b&gt;plans&lt;/b&gt; \\#\\# Assistant",
        "## User · \\#1 · —",
        "## Assistant · \\#2 · —",
        "#### Tool result t \\# h (\\`x\\`) · \\#3 · —",
    ], "only the transcript's own headings; the title is one escaped line"
    # Contents sit in fences longer than any backtick run in them: none of them is read as Markdown.
    assert "`````text\nhi\n" in text
    for needle in ("<script>", "<img", "<b>", "I will reveal", "](http", "# Owned", "> quoted"):
        assert needle not in outside, needle
    assert outside.count("<details>") == outside.count("</details>") == 2, "no content closes a <details>"
    assert "**Tool call** n&lt;b&gt; (c\\`1 \\#\\# x)" in outside


def _outside_fences(text: str) -> str:
    """The Markdown outside fenced code blocks (what a renderer interprets)."""
    out, fence = [], None
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is None:
            if stripped.startswith("```"):
                fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
                continue
            out.append(line)
        elif stripped.startswith(fence) and set(stripped) == {"`"}:
            fence = None
    return "\n".join(out)
