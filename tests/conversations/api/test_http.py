"""The REST API through Django's whole HTTP stack (``django.test.AsyncClient``: ASGI handler,
middleware, URL routing): session authentication and CSRF, token requests without CSRF, 413 by
``Content-Length``, URL-encoded dialog ids, and the OpenAPI document and docs page (PROTOCOL §2).
"""

from __future__ import annotations

import json
import secrets
import string
from urllib.parse import quote

import pytest
from channels.db import database_sync_to_async
from django.test import AsyncClient

from conversations.api.errors import MAX_BODY_BYTES
from conversations.auth import get_or_create_user
from conversations.models import Dialog
from tests.conversations.api.conftest import user_with_token

pytestmark = [pytest.mark.django_db(transaction=True)]

JSON = "application/json"


def csrf_secret() -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))


async def session_client(username: str = "alice") -> AsyncClient:
    """A client logged in with a Django session, enforcing CSRF like a browser would meet it."""
    user, _ = await database_sync_to_async(get_or_create_user)(username)
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(user)
    return client


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def test_a_session_reads_without_and_writes_only_with_csrf():
    client = await session_client()
    listed = await client.get("/api/dialogs")
    assert listed.status_code == 200 and listed.json()["total"] == 0

    refused = await client.post("/api/dialogs", data=json.dumps({"title": "no csrf"}), content_type=JSON)
    assert refused.status_code == 403
    body = refused.json()
    assert body["code"] == "csrf_failed" and body["ref"] and "X-CSRFToken" in body["message"]
    assert not await database_sync_to_async(Dialog.objects.exists)()

    secret = csrf_secret()
    client.cookies["csrftoken"] = secret
    wrong = await client.post(
        "/api/dialogs", data="{}", content_type=JSON, headers={"X-CSRFToken": csrf_secret()}
    )
    assert wrong.status_code == 403 and wrong.json()["code"] == "csrf_failed"
    created = await client.post(
        "/api/dialogs",
        data=json.dumps({"title": "with csrf"}),
        content_type=JSON,
        headers={"X-CSRFToken": secret},
    )
    assert created.status_code == 201 and created.json()["title"] == "with csrf"
    sid = created.json()["session_id"]
    for method in ("patch", "delete"):
        response = await getattr(client, method)(
            f"/api/dialogs/{sid}", data=json.dumps({"title": "x"}), content_type=JSON
        )
        assert response.status_code == 403 and response.json()["code"] == "csrf_failed"


async def test_anonymous_requests_are_401_not_403():
    client = AsyncClient(enforce_csrf_checks=True)
    for method, path in (("get", "/api/dialogs"), ("post", "/api/dialogs")):
        response = await getattr(client, method)(path)
        assert response.status_code == 401 and response.json()["code"] == "unauthorized"
    assert (await client.get("/api/health")).status_code == 200
    assert (await client.get("/api/ready")).status_code == 200


async def test_tokens_need_no_csrf_and_never_fall_back_to_the_session():
    _, token = await user_with_token("alice")
    client = AsyncClient(enforce_csrf_checks=True)
    created = await client.post("/api/dialogs", data="{}", content_type=JSON, headers=bearer(token))
    assert created.status_code == 201

    logged_in = await session_client("alice")
    assert (await logged_in.get("/api/dialogs")).status_code == 200
    bad = await logged_in.get("/api/dialogs", headers=bearer("pb_wrong"))
    assert bad.status_code == 401, "a bad token is not rescued by a valid session cookie"


async def test_bodies_over_one_mib_answer_413_by_content_length():
    _, token = await user_with_token("alice")
    client = AsyncClient()
    sid = (await client.post("/api/dialogs", content_type=JSON, headers=bearer(token))).json()["session_id"]
    # Over Django's own DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB) too: still our 413, never a 400.
    for size in (MAX_BODY_BYTES + 1, 3 * MAX_BODY_BYTES):
        payload = json.dumps({"content": "x" * size})
        for headers in (bearer(token), {}):
            response = await client.post(
                f"/api/dialogs/{quote(sid)}/messages", data=payload, content_type=JSON, headers=headers
            )
            assert response.status_code == 413, response.content
            assert response.json()["code"] == "body_too_large"
    small = await client.post(
        f"/api/dialogs/{sid}/messages",
        data=json.dumps({"content": "fits"}),
        content_type=JSON,
        headers=bearer(token),
    )
    assert small.status_code == 202


async def test_dialog_ids_work_url_encoded_or_not():
    _, token = await user_with_token("alice")
    client, auth = AsyncClient(), bearer(token)
    sid = (await client.post("/api/dialogs", content_type=JSON, headers=auth)).json()["session_id"]
    assert ":" in sid
    for shown in (sid, quote(sid, safe=""), sid.replace(":", "%3a")):
        response = await client.get(f"/api/dialogs/{shown}", headers=auth)
        assert response.status_code == 200 and response.json()["session_id"] == sid
        history = await client.get(f"/api/dialogs/{shown}/messages?limit=5", headers=auth)
        assert history.status_code == 200 and history.json()["session_id"] == sid
    location = (await client.post("/api/dialogs", content_type=JSON, headers=auth)).headers["Location"]
    assert (await client.get(location, headers=auth)).status_code == 200
    missing = await client.get("/api/dialogs/" + quote("cli_chat:1:nothing", safe=""), headers=auth)
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


async def test_openapi_document_and_docs_page():
    client = AsyncClient()
    response = await client.get("/api/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    assert set(schema["paths"]) == {
        "/api/health",
        "/api/ready",
        "/api/dialogs",
        "/api/models",
        "/api/dialogs/{session_id}",
        "/api/dialogs/{session_id}/activate",
        "/api/dialogs/{session_id}/messages",
        "/api/dialogs/{session_id}/messages/{message_id}/media/{index}",
        "/api/dialogs/{session_id}/turn",
        "/api/dialogs/{session_id}/stop",
        "/api/dialogs/{session_id}/compact",
        "/api/usage",
        "/api/dialogs/{session_id}/schedules",
        "/api/schedules",
        "/api/schedules/{schedule_id}",
        "/api/tasks",
        "/api/tasks/{task_id}/stop",
    }
    operations = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    assert len(operations) == 23, "the 23 rows of PROTOCOL §2"
    assert set(schema["components"]["securitySchemes"]) == {"BearerToken", "SessionCookie"}
    post_message = schema["paths"]["/api/dialogs/{session_id}/messages"]["post"]
    assert {"202", "401", "404", "409", "413", "422", "429"} <= set(post_message["responses"])
    assert "security" not in schema["paths"]["/api/health"]["get"]
    docs = await client.get("/api/docs")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()


async def test_unknown_api_paths_answer_json():
    response = await AsyncClient().get("/api/no/such/thing")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    wrong = await AsyncClient().put("/api/dialogs")
    assert wrong.status_code == 405 and wrong.json()["code"] == "method_not_allowed"


async def test_head_answers_like_get_without_a_body():
    _, token = await user_with_token("alice")
    client = AsyncClient()
    for path, headers in (
        ("/api/health", {}),
        ("/api/ready", {}),
        ("/api/dialogs", bearer(token)),
        ("/api/dialogs", {}),
    ):
        got = await client.get(path, headers=headers)
        head = await client.head(path, headers=headers)
        assert head.status_code == got.status_code, path
        assert head.content == b""
        assert head["Content-Type"] == got["Content-Type"]
        assert int(head["Content-Length"]) == len(got.content) > 0


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("TRACE", "/api/health", "GET, HEAD"),
        ("PROPFIND", "/api/health", "GET, HEAD"),
        ("FOO", "/api/dialogs", "GET, HEAD, POST"),
        ("OPTIONS", "/api/dialogs/cli_chat:1:ab/stop", "POST"),
        ("TRACE", "/api/dialogs/cli_chat:1:ab", "DELETE, GET, HEAD, PATCH"),
    ],
)
async def test_other_methods_answer_a_json_405_with_the_real_allow_list(method, path, allowed):
    response = await AsyncClient().generic(method, path)
    assert response.status_code == 405
    assert response["Allow"] == allowed
    assert response["Content-Type"] == "application/json; charset=utf-8"
    body = response.json()
    assert body["code"] == "method_not_allowed" and len(body["ref"]) == 8


@pytest.mark.parametrize(
    "path", ["/api/", "/api/%0A", "/api/dialogs/a%0Ab", "/api/dialogs/%0A/messages", "/api/no/such/thing"]
)
async def test_paths_no_route_matches_answer_a_json_404(path):
    for method in ("get", "post", "trace"):
        response = (
            await getattr(AsyncClient(), method)(path)
            if method != "trace"
            else await AsyncClient().generic("TRACE", path)
        )
        assert response.status_code == 404, (method, path)
        assert response["Content-Type"] == "application/json; charset=utf-8"
        body = response.json()
        assert body["code"] == "not_found" and len(body["ref"]) == 8


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("path", ["/api/docs", "/api/openapi.json"])
async def test_a_write_to_the_read_only_schema_pages_is_a_json_405_even_with_a_token(method, path):
    """The view answers these, not Django's CSRF check before any view (an HTML 403 page)."""
    _, token = await user_with_token("alice")
    for headers in ({}, bearer(token)):
        response = await AsyncClient(enforce_csrf_checks=True).generic(method, path, headers=headers)
        assert response.status_code == 405, (method, path)
        assert response["Allow"] == "GET, HEAD"
        assert response["Content-Type"] == "application/json; charset=utf-8"
        assert response.json()["code"] == "method_not_allowed"
    assert (await AsyncClient().get(path)).status_code == 200
