"""``manage.py import`` imports a file exactly or refuses it whole, naming the place: no NaN or
Infinity reaches the database, NUL is refused rather than turned into U+FFFD, ``media_refs`` are
the images a user message carries, and the app's own export of a dialog whose generated title
holds control characters imports."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from conversations.models import Dialog, Message, Plan
from conversations.transfer.errors import TransferError
from conversations.transfer.schema import validate_document
from conversations.transfer.strict_json import load_json
from tests.conversations.dialogs import PNG, make_dialog

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice")


@pytest.fixture
def exported(alice) -> dict:
    """The export of one dialog (an image on message 0, tool calls on 1), the dialog then gone."""
    dialog = make_dialog(alice)
    doc = export("--dialog", dialog.pk)
    Dialog.objects.all().delete()
    return doc


def export(*args: str) -> dict:
    out = StringIO()
    call_command("export", *args, stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


def import_text(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "doc.json"
    path.write_text(text, encoding="utf-8")
    out = StringIO()
    call_command("import", str(path), stdout=out, stderr=StringIO())
    return out.getvalue().split()


def nothing_imported() -> bool:
    return not Dialog.objects.exists() and not Message.objects.exists() and not Plan.objects.exists()


# --- standard JSON only (item: NaN / Infinity) ------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("NaN", "NaN is not a JSON number (JSON has no NaN or Infinity)"),
        ("Infinity", "Infinity is not a JSON number (JSON has no NaN or Infinity)"),
        ("-Infinity", "-Infinity is not a JSON number (JSON has no NaN or Infinity)"),
        ("1e400", "the number 1e400 is too large for a float"),
        ("-1e999", "the number -1e999 is too large for a float"),
        ("9" * 5000, "an integer has more digits than any column holds"),
    ],
)
def test_numbers_json_has_not_or_no_column_holds_are_refused_at_reading(exported, tmp_path, raw, error):
    text = json.dumps(exported).replace('"provider": "openai"', f'"provider": {raw}', 1)
    with pytest.raises(CommandError) as info:
        import_text(tmp_path, text)
    assert str(info.value).startswith(
        f"nothing imported: {tmp_path / 'doc.json'} is not standard JSON: {error}"
    )
    assert nothing_imported()


def test_a_key_twice_in_one_object_is_refused_rather_than_the_first_dropped(exported, tmp_path):
    text = json.dumps(exported).replace('"role": "user"', '"role": "assistant", "role": "user"', 1)
    with pytest.raises(
        CommandError, match=r"is not standard JSON: the key \"role\" appears twice in one object"
    ):
        import_text(tmp_path, text)
    assert nothing_imported()


def test_standard_input_is_read_as_strictly(exported, monkeypatch):
    monkeypatch.setattr("sys.stdin", StringIO(json.dumps(exported).replace('"openai"', "NaN", 1)))
    with pytest.raises(
        CommandError, match="nothing imported: - is not standard JSON: NaN is not a JSON number"
    ):
        call_command("import", "-", stdout=StringIO(), stderr=StringIO())
    assert nothing_imported()


def test_what_does_not_start_like_an_export_is_refused_without_reading_it_all(tmp_path, monkeypatch):
    """``import /dev/zero`` must not read forever: a binary or non-object file is refused at its start."""

    class Endless:
        reads = 0

        def read(self, size: int = -1) -> str:
            assert size > 0, "read in bounded pieces"
            self.reads += 1
            return "\x00" * size

    endless = Endless()
    monkeypatch.setattr("sys.stdin", endless)
    with pytest.raises(CommandError, match="nothing imported: - is not JSON: an export is a JSON object"):
        call_command("import", "-", stdout=StringIO(), stderr=StringIO())
    assert endless.reads == 1
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(CommandError, match="is not JSON: an export is a JSON object"):
        call_command("import", str(tmp_path / "list.json"), stdout=StringIO(), stderr=StringIO())
    (tmp_path / "latin1.json").write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(CommandError, match="is not UTF-8 text"):
        call_command("import", str(tmp_path / "latin1.json"), stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="--user needs a username"):
        call_command(
            "import", str(tmp_path / "list.json"), "--user", "", stdout=StringIO(), stderr=StringIO()
        )


def test_a_utf8_byte_order_mark_before_the_export_is_accepted(exported, tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(exported).encode())
    out = StringIO()
    call_command("import", str(path), stdout=out, stderr=StringIO())
    assert out.getvalue().split() == [exported["dialogs"][0]["id"]]


def test_load_json_reads_standard_json_unchanged():
    text = '{"a": [1, -0.5, 1e300, 12345678901234567890, "é\\u0000", null, true], "b": {"a": 1}}'
    assert load_json(StringIO(text)) == json.loads(text)
    with pytest.raises(TransferError, match="is not JSON: Expecting"):
        load_json(StringIO("{not json"))


def msg(i: int) -> Callable[[dict], dict]:
    return lambda d: d["dialogs"][0]["messages"][i]


def changed(doc: dict, change: Callable[[dict], object]) -> dict:
    doc = copy.deepcopy(doc)
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("change", "error"),
    [
        # A document built in memory (not read by load_json) with non-finite numbers.
        (
            lambda d: msg(1)(d)["provider_state"].update(usage=float("nan")),
            r"dialogs[0].messages[1].provider_state.usage: is not a finite number",
        ),
        (
            lambda d: msg(1)(d)["tool_calls"][0]["arguments"].update(x=[1, float("-inf")]),
            r"dialogs[0].messages[1].tool_calls[0].arguments.x[1]: is not a finite number",
        ),
        (
            lambda d: msg(0)(d)["source"].update({"odd key": float("inf")}),
            r"dialogs[0].messages[0].source[\"odd key\"]: is not a finite number",
        ),
    ],
)
def test_validate_document_refuses_non_finite_numbers_naming_the_place(exported, change, error):
    with pytest.raises(TransferError) as info:
        validate_document(changed(exported, change))
    assert str(info.value) == error.replace("\\", "")


# --- NUL and lone surrogates are refused, never changed -----------------------------------------

NUL = "holds a NUL character (\\u0000), which the database cannot store"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda d: msg(0)(d).update(content="a\x00b"), f"dialogs[0].messages[0].content: {NUL}"),
        (
            lambda d: msg(1)(d).update(reasoning_content="\x00"),
            f"dialogs[0].messages[1].reasoning_content: {NUL}",
        ),
        (lambda d: d["dialogs"][0].update(title="Title\x00"), f"dialogs[0].title: {NUL}"),
        (lambda d: d["dialogs"][0].update(summary="s\x00"), f"dialogs[0].summary: {NUL}"),
        (
            lambda d: msg(1)(d)["provider_state"].update({"k\x00": 1}),
            f"dialogs[0].messages[1].provider_state: a key {NUL}",
        ),
        (
            lambda d: msg(1)(d)["tool_calls"][1].update(raw_arguments="{\x00"),
            f"dialogs[0].messages[1].tool_calls[1].raw_arguments: {NUL}",
        ),
        (
            lambda d: d["dialogs"][0]["plan"]["content"]["steps"][0].update(text="a\x00"),
            f"dialogs[0].plan.content.steps[0].text: {NUL}",
        ),
        (
            lambda d: msg(2)(d).update(content="\udc80"),
            "dialogs[0].messages[2].content: is not valid Unicode (a lone surrogate)",
        ),
    ],
)
def test_nul_and_lone_surrogates_are_refused_with_the_place_named(exported, tmp_path, change, error):
    with pytest.raises(CommandError) as info:
        import_text(tmp_path, json.dumps(changed(exported, change), ensure_ascii=True))
    assert str(info.value).startswith(f"nothing imported: {error}")
    assert nothing_imported()


@pytest.mark.parametrize("seq", [1.0, True, "1"])
def test_a_seq_the_export_never_writes_is_refused(exported, tmp_path, seq):
    """1.0 == 1 and True == 1 in Python: an equality check alone would let them in."""
    doc = changed(exported, lambda d: msg(0)(d).update(seq=seq))
    with pytest.raises(CommandError, match=r"dialogs\[0\]\.messages\[0\]"):
        import_text(tmp_path, json.dumps(doc))
    assert nothing_imported()


def test_an_unknown_owner_with_a_line_break_in_its_name_is_one_error_line(exported, tmp_path):
    doc = changed(exported, lambda d: d["dialogs"][0].update(owner="a\nb"))
    with pytest.raises(CommandError) as info:
        import_text(tmp_path, json.dumps(doc))
    assert "\n" not in str(info.value) and "createtoken 'a\\nb'" in str(info.value)
    assert nothing_imported()


# --- media_refs as a user message carries them ---------------------------------------------------

JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 16).decode()
BIG_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * (3 * 1024 * 1024)).decode()


@pytest.mark.parametrize(
    ("media", "error"),
    [
        ([1], r"messages\[0\]\.media_refs\[0\] must be an object"),
        (["x"], r"messages\[0\]\.media_refs\[0\] must be an object"),
        (
            [{"mime_type": "text/html", "data": "PHNjcmlwdD4="}],
            r"messages\[0\]\.media_refs\[0\]\.mime_type must be one of image/png, image/jpeg, image/gif, image/webp",
        ),
        ([{"no": "keys"}], r"messages\[0\]\.media_refs\[0\] has unknown field\(s\) 'no'"),
        (
            [{"mime_type": "image/png", "data": PNG, "url": "http://x"}],
            r"messages\[0\]\.media_refs\[0\] has unknown field\(s\) 'url'",
        ),
        ([{"mime_type": "image/png"}], r"messages\[0\]\.media_refs\[0\]\.data must be base64 text"),
        (
            [{"mime_type": "image/png", "data": 5}],
            r"messages\[0\]\.media_refs\[0\]\.data must be base64 text",
        ),
        (
            [{"mime_type": "image/png", "data": "not base64!"}],
            r"messages\[0\]\.media_refs\[0\]\.data is not valid base64",
        ),
        (
            [{"mime_type": "image/png", "data": JPEG}],
            r"messages\[0\]\.media_refs\[0\]\.data is not an image of type image/png",
        ),
        (
            [{"mime_type": "image/png", "data": PNG}] * 9,
            r"messages\[0\]\.media_refs: at most 8 media items per message",
        ),
        (
            [{"mime_type": "image/png", "data": BIG_PNG}] * 2,
            r"messages\[0\]\.media_refs: media exceed 5 MiB in all",
        ),
        ({"mime_type": "image/png", "data": PNG}, r"messages\[0\]\.media_refs must be a list"),
    ],
)
def test_media_refs_are_checked_as_the_app_checks_a_messages_images(exported, tmp_path, media, error):
    doc = changed(exported, lambda d: msg(0)(d).update(media_refs=media))
    with pytest.raises(CommandError, match=r"nothing imported: dialogs\[0\]\." + error):
        import_text(tmp_path, json.dumps(doc))
    assert nothing_imported()


def test_only_user_messages_carry_media(exported, tmp_path):
    doc = changed(exported, lambda d: msg(4)(d).update(media_refs=msg(0)(d)["media_refs"]))
    with pytest.raises(CommandError, match=r"messages\[4\]\.media_refs: only user messages carry media"):
        import_text(tmp_path, json.dumps(doc))
    assert nothing_imported()


def test_every_image_type_the_app_accepts_imports_exactly(exported, tmp_path):
    media = [
        {"mime_type": "image/png", "data": PNG},
        {"mime_type": "image/jpeg", "data": JPEG},
        {"mime_type": "image/gif", "data": base64.b64encode(b"GIF89a" + b"\x00" * 8).decode()},
        {"mime_type": "image/webp", "data": base64.b64encode(b"RIFF\x10\x00\x00\x00WEBPVP8 ").decode()},
    ]
    doc = changed(exported, lambda d: msg(0)(d).update(media_refs=media))
    [imported] = import_text(tmp_path, json.dumps(doc))
    assert Message.objects.get(dialog_id=imported, seq=1).media_refs == media


# --- titles the app stored are imported as they are ----------------------------------------------


@pytest.mark.parametrize(
    "title", ["Weather \x1b[1mreport", "Bell\x07 title", "Notes \ue000 private", "\U000e0001 tag"]
)
def test_a_stored_title_with_control_or_private_use_characters_round_trips(alice, tmp_path, title):
    """Generated titles were stored without the rename check: existing databases hold these."""
    dialog = make_dialog(alice)
    Dialog.objects.filter(pk=dialog.pk).update(title=title)
    path = tmp_path / "e.json"
    call_command("export", "--dialog", dialog.pk, "-o", str(path), stderr=StringIO())
    first = json.loads(path.read_text())
    Dialog.objects.all().delete()
    call_command("import", str(path), stdout=StringIO(), stderr=StringIO())
    assert Dialog.objects.get(pk=dialog.pk).title == title
    again = export("--dialog", dialog.pk)
    assert {**again, "exported_at": 0} == {**first, "exported_at": 0}


# --- the database's own refusal is one line too ---------------------------------------------------


def test_a_value_the_database_refuses_after_validation_is_one_line(exported, tmp_path, monkeypatch):
    """Validation refuses first; should a rule be missing, the database error is no traceback."""
    monkeypatch.setattr("conversations.transfer.importer.validate_document", lambda doc: doc["dialogs"])
    doc = changed(exported, lambda d: msg(1)(d).update(seq=1))  # two rows with seq 1
    with pytest.raises(CommandError) as info:
        import_text(tmp_path, json.dumps(doc))
    message = str(info.value)
    assert message.startswith("nothing imported: the database refused a value: ") and "\n" not in message
    # SQLite and PostgreSQL word it their own way.
    assert (
        "UNIQUE constraint failed" in message or "duplicate key value violates unique constraint" in message
    )
    assert nothing_imported()


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ('"role": "user"', '"role": "assistant", "role": "user"', "(at dialogs[0].messages[0].role)"),
        ('"provider": "openai"', '"provider": NaN', "(at dialogs[0].messages[1].provider_state.provider)"),
        ('"provider": "openai"', '"provider": 1e400', "(at dialogs[0].messages[1].provider_state.provider)"),
    ],
)
def test_a_value_json_reading_refuses_is_named_by_its_path(exported, tmp_path, old, new, where):
    text = json.dumps(exported).replace(old, new, 1)
    with pytest.raises(CommandError) as info:
        import_text(tmp_path, text)
    assert str(info.value).endswith(where), str(info.value)
    assert nothing_imported()


def test_the_path_is_of_the_value_json_refused_first(exported, tmp_path):
    """A NaN among an object's values is refused before that object's duplicated key."""
    text = json.dumps(exported).replace('"role": "user"', '"role": "user", "seq": NaN, "role": "user"', 1)
    with pytest.raises(CommandError) as info:
        import_text(tmp_path, text)
    assert "NaN is not a JSON number" in str(info.value)
    assert str(info.value).endswith("(at dialogs[0].messages[0].seq)"), str(info.value)
