"""The export format's strict schema: unknown fields, wrong types and non-finite numbers are refused
with the JSON path of the bad value; free-form values nest at most ``MAX_JSON_DEPTH`` deep."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from pydantic import ValidationError

from conversations.models import Dialog, Message
from conversations.transfer.errors import TransferError
from conversations.transfer.schema import DialogIn, validate_document
from conversations.transfer.strict_json import check_storable_json, loads_strict
from providers.json_depth import MAX_JSON_DEPTH
from tests.conversations.dialogs import make_dialog

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def exported() -> dict:
    """The export of one dialog (an image on message 0, two tool calls on 1), the dialog then gone."""
    dialog = make_dialog(get_user_model().objects.create_user("alice"))
    out = StringIO()
    call_command("export", "--dialog", dialog.pk, stdout=out, stderr=StringIO())
    Dialog.objects.all().delete()
    return json.loads(out.getvalue())


def msg(i: int) -> Callable[[dict], dict]:
    return lambda d: d["dialogs"][0]["messages"][i]


def changed(doc: dict, change: Callable[[dict], object]) -> dict:
    doc = copy.deepcopy(doc)
    change(doc)
    return doc


def refusal(doc: dict) -> str:
    with pytest.raises(TransferError) as info:
        validate_document(doc)
    return str(info.value)


def import_text(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "doc.json"
    path.write_text(text, encoding="utf-8")
    out = StringIO()
    call_command("import", str(path), stdout=out, stderr=StringIO())
    return out.getvalue().split()


def nested(depth: int) -> dict:
    """An object ``depth`` levels deep: ``{"a": {"a": … {}}}`` (``{}`` is 1 level)."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


V1 = "(this PicoBot reads version 1)"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            lambda d: msg(1)(d)["tool_calls"][1].update(extra=1),
            f"dialogs[0].messages[1].tool_calls[1] has unknown field(s) 'extra' {V1}",
        ),
        (lambda d: msg(3)(d).update(dialog=1), f"dialogs[0].messages[3] has unknown field(s) 'dialog' {V1}"),
        (
            lambda d: d["dialogs"][0]["plan"].update(steps=[]),
            f"dialogs[0].plan has unknown field(s) 'steps' {V1}",
        ),
        (
            lambda d: d["dialogs"][0].update({"b": 1, "a": 2, "odd key": 3, "d": 4}),
            f"dialogs[0] has unknown field(s) 'a', 'b', 'd' … {V1}",
        ),
        (lambda d: d.update(comment="hi"), f"the document has unknown field(s) 'comment' {V1}"),
        # An object's unknown fields come first: a misspelt field explains the missing one.
        (
            lambda d: msg(2)(d).update(rol=msg(2)(d).pop("role")),
            f"dialogs[0].messages[2] has unknown field(s) 'rol' {V1}",
        ),
    ],
)
def test_an_unknown_field_is_refused_naming_its_object(exported, change, error):
    assert refusal(changed(exported, change)) == error


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            lambda d: msg(3)(d).update(role=5),
            "dialogs[0].messages[3].role must be one of ['assistant', 'tool', 'user'], got 5",
        ),
        (
            lambda d: msg(2)(d).update(is_error="yes"),
            'dialogs[0].messages[2].is_error must be true or false, got "yes"',
        ),
        (
            lambda d: msg(0)(d).update(content=["hi"]),
            'dialogs[0].messages[0].content must be a string, got ["hi"]',
        ),
        (
            lambda d: msg(1)(d)["tool_calls"][0].update(arguments=[]),
            "dialogs[0].messages[1].tool_calls[0].arguments must be an object, got []",
        ),
        (
            lambda d: msg(1)(d)["tool_calls"].append("call"),
            'dialogs[0].messages[1].tool_calls[2] must be an object, got "call"',
        ),
        (
            lambda d: msg(1)(d).update(iteration="0"),
            'dialogs[0].messages[1].iteration must be an integer from 0 to 2147483647, got "0"',
        ),
        (
            lambda d: msg(1)(d).update(iteration=0.0),
            "dialogs[0].messages[1].iteration must be an integer from 0 to 2147483647, got 0.0",
        ),
        (
            lambda d: msg(1)(d).update(source=None),
            "dialogs[0].messages[1].source must be an object, got null",
        ),
        (
            lambda d: d["dialogs"][0].update(title_is_default=1),
            "dialogs[0].title_is_default must be true or false, got 1",
        ),
        (lambda d: d["dialogs"][0].update(messages={}), "dialogs[0].messages must be a list, got {}"),
        (lambda d: d["dialogs"][0].pop("messages"), "dialogs[0].messages is required (a list)"),
        (lambda d: d["dialogs"].append([]), "dialogs[1] must be an object, got []"),
    ],
)
def test_a_wrong_type_is_refused_naming_its_json_path(exported, change, error):
    assert refusal(changed(exported, change)) == error


def test_the_command_prints_the_json_path_of_a_wrong_type(exported, tmp_path):
    doc = changed(exported, lambda d: msg(4)(d).update(completion_status="done"))
    with pytest.raises(CommandError) as info:
        import_text(tmp_path, json.dumps(doc))
    assert str(info.value) == (
        "nothing imported: dialogs[0].messages[4].completion_status must be one of "
        "['cancelled', 'completed', 'interrupted'], got \"done\""
    )
    assert not Dialog.objects.exists()


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("where", ['"created_at": 1700000000000', '"iteration": 0', '"tz": "Europe/Paris"'])
def test_nan_and_infinity_literals_are_refused_wherever_they_stand(exported, tmp_path, literal, where):
    """Python's ``json`` reads these literals as floats; an export never holds one."""
    text = json.dumps(exported)
    assert where in text
    key = where.split(":")[0]
    with pytest.raises(CommandError, match=f"is not standard JSON: {literal} is not a JSON number"):
        import_text(tmp_path, text.replace(where, f"{key}: {literal}", 1))
    assert not Dialog.objects.exists() and not Message.objects.exists()


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_built_in_memory_are_refused_with_their_path(exported, number):
    doc = changed(exported, lambda d: d["dialogs"][0].update(created_at=number))
    assert refusal(doc) == "dialogs[0].created_at: is not a finite number"
    assert (
        refusal(changed(exported, lambda d: d.update(exported_at=number)))
        == "exported_at: is not a finite number"
    )


def test_the_models_alone_refuse_non_finite_and_non_integer_numbers():
    base = {"channel": "feishu", "chat_id": "c", "dialog_id": "d", "messages": []}
    for value in (float("nan"), float("inf"), 1.0, True, "1"):
        with pytest.raises(ValidationError):
            DialogIn.model_validate({**base, "created_at": value})
    assert DialogIn.model_validate({**base, "created_at": 1}).created_at == 1


def test_tool_arguments_as_deep_as_the_app_stores_round_trip_and_one_level_more_is_refused(
    exported, tmp_path
):
    """The bound is the model-provided JSON's own (``providers.json_depth``), counted from the
    value: the export's own levels above it do not count."""
    deepest = changed(exported, lambda d: msg(1)(d)["tool_calls"][0].update(arguments=nested(MAX_JSON_DEPTH)))
    [imported] = import_text(tmp_path, json.dumps(deepest))
    assert Message.objects.get(dialog_id=imported, seq=2).tool_calls[0]["arguments"] == nested(MAX_JSON_DEPTH)
    Dialog.objects.all().delete()
    deeper = changed(
        exported, lambda d: msg(1)(d)["tool_calls"][0].update(arguments=nested(MAX_JSON_DEPTH + 1))
    )
    with pytest.raises(CommandError) as info:
        import_text(tmp_path, json.dumps(deeper))
    assert str(info.value) == (
        f"nothing imported: dialogs[0].messages[1].tool_calls[0].arguments nests deeper than {MAX_JSON_DEPTH} levels"
    )
    assert not Dialog.objects.exists()


@pytest.mark.parametrize("field", ["provider_state", "source"])
def test_every_free_form_value_has_the_same_depth_bound(exported, field):
    doc = changed(exported, lambda d: msg(0)(d).update({field: nested(MAX_JSON_DEPTH + 1)}))
    assert refusal(doc) == f"dialogs[0].messages[0].{field} nests deeper than {MAX_JSON_DEPTH} levels"
    validate_document(changed(exported, lambda d: msg(0)(d).update({field: nested(MAX_JSON_DEPTH)})))


def test_the_admin_json_rules_share_the_depth_bound():
    check_storable_json(loads_strict(json.dumps(nested(MAX_JSON_DEPTH))))
    with pytest.raises(TransferError, match=f"^the document nests deeper than {MAX_JSON_DEPTH} levels$"):
        check_storable_json(nested(MAX_JSON_DEPTH + 1))
