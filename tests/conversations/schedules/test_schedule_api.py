"""Scheduled prompts over REST: list, create (201, 422 per field, 409 over the cap), pause, delete;
another user's schedule or dialog is a 404."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.models import Schedule
from tests.conversations.api.conftest import ApiClient, user_with_token

pytestmark = [pytest.mark.django_db(transaction=True)]


async def client_and_dialog(username: str) -> tuple[ApiClient, str]:
    user, token = await user_with_token(username)
    dialog = await database_sync_to_async(storage.active_dialog)(user, "cli_chat", str(user.pk))
    return ApiClient(token), dialog.id


async def test_a_schedule_is_created_listed_paused_and_deleted():
    alice, dialog = await client_and_dialog("alice")
    created = await alice.post(
        f"/dialogs/{dialog}/schedules",
        json={"cron": "0 9 * * MON-FRI", "prompt": "Daily report", "tz": "Asia/Tokyo"},
    )
    assert created.status_code == 201, created.json()
    item = created.json()
    assert (item["cron"], item["tz"], item["prompt"], item["enabled"]) == (
        "0 9 * * MON-FRI",
        "Asia/Tokyo",
        "Daily report",
        True,
    )
    assert item["next_run_at"] % 3_600_000 == 0  # 09:00 Tokyo is a whole UTC hour

    default_tz = await alice.post(
        f"/dialogs/{dialog}/schedules", json={"cron": "@every 2h", "prompt": "ping"}
    )
    assert default_tz.json()["tz"] == "UTC"  # PICOBOT_TIME_ZONE
    listing = (await alice.get(f"/dialogs/{dialog}/schedules")).json()["items"]
    assert [i["id"] for i in listing] == [item["id"], default_tz.json()["id"]]

    paused = await alice.patch(f"/schedules/{item['id']}", json={"enabled": False})
    assert paused.status_code == 200 and (paused.json()["enabled"], paused.json()["next_run_at"]) == (
        False,
        None,
    )
    resumed = (await alice.patch(f"/schedules/{item['id']}", json={"enabled": True})).json()
    assert resumed["enabled"] and resumed["next_run_at"] == item["next_run_at"]

    deleted = await alice.delete(f"/schedules/{item['id']}")
    assert deleted.status_code == 204
    assert [i["id"] for i in (await alice.get(f"/dialogs/{dialog}/schedules")).json()["items"]] == [
        default_tz.json()["id"]
    ]
    again = await alice.delete(f"/schedules/{item['id']}")
    assert again.status_code == 404 and again.json()["code"] == "not_found"


async def test_a_schedule_is_edited_field_by_field_and_a_new_time_counts_from_now():
    alice, dialog = await client_and_dialog("alice")
    item = (
        await alice.post(f"/dialogs/{dialog}/schedules", json={"cron": "0 9 * * *", "prompt": "Daily report"})
    ).json()
    reworded = await alice.patch(f"/schedules/{item['id']}", json={"prompt": "Weekly report"})
    assert reworded.status_code == 200, reworded.json()
    assert (reworded.json()["prompt"], reworded.json()["next_run_at"]) == (
        "Weekly report",
        item["next_run_at"],
    )
    moved = (
        await alice.patch(f"/schedules/{item['id']}", json={"cron": "@every 1h", "tz": "Asia/Tokyo"})
    ).json()
    assert (moved["cron"], moved["tz"], moved["prompt"]) == ("@every 1h", "Asia/Tokyo", "Weekly report")
    assert moved["next_run_at"] - moved["created_at"] >= 3_600_000 - 60_000  # an hour from the edit
    bad = await alice.patch(f"/schedules/{item['id']}", json={"cron": "61 * * * *", "prompt": "x"})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_schedule"
    assert bad.json()["errors"][0]["loc"] == ["body", "cron"]
    kept = (await alice.get(f"/dialogs/{dialog}/schedules")).json()["items"][0]
    assert (kept["cron"], kept["prompt"]) == ("@every 1h", "Weekly report"), "a refused edit changes nothing"
    paused = (await alice.patch(f"/schedules/{item['id']}", json={"enabled": False, "cron": "@daily"})).json()
    assert (paused["cron"], paused["enabled"], paused["next_run_at"]) == ("@daily", False, None)


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"cron": "0 25 * * *", "prompt": "x"}, "cron", "not a valid cron expression"),
        ({"cron": "@every 10s", "prompt": "x"}, "cron", "@every N"),
        ({"cron": "* * * * * *", "prompt": "x"}, "cron", "5 fields"),
        ({"cron": "0 9 * * *", "prompt": "x", "tz": "Moon/Base"}, "tz", "unknown time zone"),
        ({"cron": "0 9 * * *", "prompt": "   "}, "prompt", "give the prompt"),
        ({"cron": "0 9 * * *", "prompt": " /compact"}, "prompt", "slash commands cannot be scheduled"),
        ({"cron": "0 9 * * *", "prompt": "p" * 4001}, "prompt", "at most 4000 characters"),
        ({"cron": "0 9 * * *" + " " * 10 + "x" * 100, "prompt": "p"}, "cron", "at most 100 characters"),
    ],
)
async def test_bad_fields_are_a_422_naming_the_field_and_nothing_is_created(body, field, says):
    alice, dialog = await client_and_dialog("alice")
    response = await alice.post(f"/dialogs/{dialog}/schedules", json=body)
    assert response.status_code == 422
    error = response.json()
    assert error["code"] == "invalid_schedule" and says in error["message"] and error["ref"]
    assert error["errors"][0]["loc"] == ["body", field]
    assert (await alice.get(f"/dialogs/{dialog}/schedules")).json()["items"] == []


async def test_a_missing_field_is_invalid_schedule_naming_it_and_a_wrong_type_the_usual_422():
    alice, dialog = await client_and_dialog("alice")
    cases = [({"cron": "0 9 * * *"}, "prompt"), ({"prompt": "p"}, "cron"), ({}, "cron")]
    cases += [({"cron": "0 9 * * *", "prompt": None}, "prompt"), ({"cron": None, "prompt": "p"}, "cron")]
    for body, field in cases:
        response = await alice.post(f"/dialogs/{dialog}/schedules", json=body)
        error = response.json()
        assert (response.status_code, error["code"], error["errors"][0]["loc"]) == (
            422,
            "invalid_schedule",
            ["body", field],
        ), body
    response = await alice.post(f"/dialogs/{dialog}/schedules", json={"cron": "@daily", "prompt": ["p"]})
    assert response.status_code == 422 and response.json()["code"] == "validation_error"


async def test_all_schedules_of_the_caller_are_listed_across_dialogs_with_their_titles():
    alice, dialog = await client_and_dialog("alice")
    other = (await alice.post("/dialogs", json={"title": "Reports"})).json()["session_id"]
    for target in (dialog, other):
        assert (
            await alice.post(f"/dialogs/{target}/schedules", json={"cron": "@daily", "prompt": "p"})
        ).status_code == 201
    bob, bobs = await client_and_dialog("bob")
    await bob.post(f"/dialogs/{bobs}/schedules", json={"cron": "@daily", "prompt": "theirs"})

    items = (await alice.get("/schedules")).json()["items"]

    assert [(item["session_id"], item["dialog_title"]) for item in items][1] == (other, "Reports")
    assert [item["session_id"] for item in items] == [dialog, other]


async def test_the_per_user_cap_is_a_409_and_a_deleted_dialogs_schedules_do_not_count(settings):
    settings.PICOBOT = settings.PICOBOT.replace(schedules_per_user=2)
    alice, dialog = await client_and_dialog("alice")
    other = (await alice.post("/dialogs", json={"title": "other"})).json()["session_id"]
    for target in (dialog, other):
        created = await alice.post(f"/dialogs/{target}/schedules", json={"cron": "@daily", "prompt": "p"})
        assert created.status_code == 201
    refused = await alice.post(f"/dialogs/{dialog}/schedules", json={"cron": "@daily", "prompt": "p3"})
    assert refused.status_code == 409 and refused.json()["code"] == "schedule_limit"
    assert "2 scheduled prompts" in refused.json()["message"]
    gone = (await alice.get(f"/dialogs/{other}/schedules")).json()["items"][0]
    assert (await alice.delete(f"/dialogs/{other}")).status_code == 204
    again = await alice.post(f"/dialogs/{dialog}/schedules", json={"cron": "@daily", "prompt": "p3"})
    assert again.status_code == 201
    # The deleted dialog's schedule is off at once and can no longer be resumed or changed.
    row = await database_sync_to_async(Schedule.objects.get)(pk=gone["id"])
    assert (row.enabled, row.next_run_at) == (False, None)
    resumed = await alice.patch(f"/schedules/{gone['id']}", json={"enabled": True})
    assert resumed.status_code == 404 and resumed.json()["code"] == "not_found"


async def test_another_users_schedules_and_dialogs_are_404():
    alice, dialog = await client_and_dialog("alice")
    bob, _ = await client_and_dialog("bob")
    item = (
        await alice.post(f"/dialogs/{dialog}/schedules", json={"cron": "@daily", "prompt": "mine"})
    ).json()
    for response in (
        await bob.get(f"/dialogs/{dialog}/schedules"),
        await bob.post(f"/dialogs/{dialog}/schedules", json={"cron": "@daily", "prompt": "theirs"}),
        await bob.delete(f"/schedules/{item['id']}"),
        await bob.patch(f"/schedules/{item['id']}", json={"enabled": False}),
    ):
        assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert (await alice.get(f"/dialogs/{dialog}/schedules")).json()["items"][0]["enabled"] is True
