"""Planted secrets never leave the server (issue 16, "Secrets"; DESIGN §8: secrets never appear
in logs, errors shown to users, admin pages or exports).

The real ``serve`` runs with planted values: the LLM API key (the model server answers 401 and
echoes the key in its error, as OpenAI does), the Django secret key, the Feishu App Secret
(refused by the fake Open API), Encrypt Key and Verification Token. Then every path that logs or
shows things is exercised: failed logins (a planted password, an API token as a wrong user's
password), REST errors with a token in the header and in the query string (a request's path is
logged and echoed as sent, so a token pasted into a path is not looked at), WebSocket frames of a
turn that fails on the provider's 401 and of invalid frames, Feishu webhook posts (plain,
encrypted garbage, a wrong token), every admin page (list, add, first object's change page) of
every model as a superuser, the JSON and Markdown exports, ``doctor`` (also with a database URL
whose password cannot connect, and a malformed one). Every byte the server printed (all its log
lines) and everything it answered is then searched for each secret.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import websockets

from providers.testing import LocalSSEServer, RecordedRequest, SSEResponse
from tests.conversations.feishu.conftest import message_event
from tests.conversations.feishu.fake_server import APP_ID, FakeFeishuServer
from tests.conversations.feishu.test_envelope import signed
from tests.e2e.serve_process import REPO, ServeProcess, manage, server_env

pytestmark = pytest.mark.e2e

WAIT = 60.0


def planted(kind: str) -> str:
    return f"planted-{kind}-{secrets.token_hex(12)}"


SECRETS = {
    "llm_api_key": "sk-" + planted("llm-key"),
    "secret_key": planted("django-secret-key") + secrets.token_hex(16),
    "feishu_app_secret": planted("feishu-app-secret"),
    "feishu_encrypt_key": planted("feishu-encrypt-key"),
    "feishu_verification_token": planted("feishu-verification-token"),
    "database_password": planted("db-password"),
    "login_password": planted("login-password"),
    "admin_password": planted("admin-password"),
}


def server_settings(llm: LocalSSEServer, feishu: FakeFeishuServer) -> dict[str, str]:
    return {
        "PICOBOT_LLM_PROVIDER": "openai",
        "PICOBOT_LLM_BASE_URL": llm.base_url,
        "PICOBOT_LLM_API_KEY": SECRETS["llm_api_key"],
        "PICOBOT_LLM_MODEL": "test-model",
        "PICOBOT_LLM_MAX_RETRIES": "0",
        "PICOBOT_SECRET_KEY": SECRETS["secret_key"],
        "PICOBOT_FEISHU_MODE": "webhook",
        "PICOBOT_FEISHU_APP_ID": APP_ID,
        "PICOBOT_FEISHU_APP_SECRET": SECRETS["feishu_app_secret"],
        "PICOBOT_FEISHU_ENCRYPT_KEY": SECRETS["feishu_encrypt_key"],
        "PICOBOT_FEISHU_VERIFICATION_TOKEN": SECRETS["feishu_verification_token"],
        "PICOBOT_FEISHU_API_BASE": feishu.url,
        "PICOBOT_LOG_LEVEL": "DEBUG",
    }


def echo_the_key(request: RecordedRequest) -> SSEResponse:
    """OpenAI's answer to a wrong key: 401, the key (as sent) in the message."""
    key = request.headers.get("authorization", "").removeprefix("Bearer ")
    body = {"error": {"message": f"Incorrect API key provided: {key}.", "type": "invalid_request_error"}}
    return SSEResponse(
        status=401, headers={"content-type": "application/json"}, pieces=[json.dumps(body).encode()]
    )


def run_command(data_dir: Path, env: dict[str, str], *args: str) -> str:
    """``manage.py ARGS`` with ``env``; stdout and stderr whatever the exit code."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=server_env(data_dir, env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


async def log_in(client: httpx.AsyncClient, username: str, password: str) -> httpx.Response:
    page = await client.get("login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return await client.post(
        "login/", data={"csrfmiddlewaretoken": token, "username": username, "password": password}
    )


async def failed_turn_frames(ws_url: str, token: str) -> list[str]:
    """A message whose turn fails on the provider's 401, and two invalid frames: every frame."""
    frames: list[str] = []
    async with websockets.connect(f"{ws_url}?token={token}") as ws:
        frames.append(await ws.recv())
        await ws.send(json.dumps({"type": "message", "content": "Hello?", "client_msg_id": "m1"}))
        await ws.send(json.dumps({"type": "history", "session_id": "cli_chat:1:nope"}))
        await ws.send("{not json")
        async with asyncio.timeout(WAIT):
            while not any('"turn_committed"' in f for f in frames) or not any(
                '"failed"' in f for f in frames
            ):
                frames.append(await ws.recv())
        await ws.send(json.dumps({"type": "ping", "nonce": "done"}))
        while '"pong"' not in frames[-1]:
            frames.append(await ws.recv())
    return frames


async def admin_pages(client: httpx.AsyncClient) -> list[str]:
    """Every model's list, add and first change page (as the logged-in superuser)."""
    index = await client.get("admin/")
    assert index.status_code == 200
    shown = [index.text]
    for model in sorted(set(re.findall(r'href="(/admin/[a-z_]+/[a-z_]+/)"', index.text))):
        listing = await client.get(model.lstrip("/"))
        shown.append(listing.text)
        links = re.findall(rf'href="({re.escape(model)}[^"/]+/change/)', listing.text)
        for url in [model + "add/", *links[:1]]:
            shown.append((await client.get(url.lstrip("/"))).text)
    return shown


async def test_planted_secrets_appear_in_no_log_line_frame_page_or_export(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    seen: dict[str, str] = {}  # where → what the server printed, answered or wrote
    with FakeFeishuServer() as feishu:
        async with LocalSSEServer(handler=echo_the_key) as llm:
            env = server_settings(llm, feishu)
            server = ServeProcess(data_dir, env)
            await server.start()
            try:
                created = await asyncio.to_thread(manage, data_dir, "createtoken", "alice", extra_env=env)
                token = created.strip().splitlines()[-1]
                await asyncio.to_thread(
                    manage, data_dir, "createsuperuser", "--noinput", "--username", "root", "--email", "root@example.com",
                    extra_env=env | {"DJANGO_SUPERUSER_PASSWORD": SECRETS["admin_password"]},
                )  # fmt: skip
                seen["websocket frames"] = "\n".join(await failed_turn_frames(server.ws_url, token))
                async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                    answers = [
                        await log_in(client, "alice", SECRETS["login_password"]),
                        await log_in(client, "nobody", token),
                        await log_in(client, "root", SECRETS["admin_password"] + "x"),
                        await client.get("api/dialogs", headers={"Authorization": f"Bearer {token}x"}),
                        await client.get("api/dialogs/x:y:z", headers={"Authorization": f"Bearer {token}"}),
                        await client.get(f"api/no-such-path?token={token}"),
                        await client.post(f"api/dialogs?token={token}", content=b"{"),
                    ]
                    for body in (
                        message_event("om_1", "hi", token=SECRETS["feishu_verification_token"]),
                        message_event("om_2", "hi", token="wrong-" + SECRETS["feishu_verification_token"]),
                        {"encrypt": "bm90IGEgcmVhbCBjaXBoZXJ0ZXh0"},
                        {"type": "url_verification", "token": SECRETS["feishu_verification_token"]},
                    ):
                        raw = json.dumps(body).encode()
                        signature = signed(raw, SECRETS["feishu_encrypt_key"])
                        answers.append(await client.post("feishu/events/", content=raw, headers=signature))
                        answers.append(await client.post("feishu/events/", content=raw))  # unsigned
                    seen["http answers"] = "\n".join(f"{r.status_code} {r.headers} {r.text}" for r in answers)
                    assert (await log_in(client, "root", SECRETS["admin_password"])).status_code == 302
                    pages = await admin_pages(client)
                    seen["admin pages"] = "\n".join(pages)
                    print(f"{len(pages)} admin pages; answers: {[r.status_code for r in answers]}")
                for fmt in ("json", "markdown"):
                    out = data_dir / f"export.{fmt}"
                    await asyncio.to_thread(
                        manage,
                        data_dir,
                        "export",
                        "--user",
                        "alice",
                        "--format",
                        fmt,
                        "-o",
                        str(out),
                        extra_env=env,
                    )
                    seen[f"export {fmt}"] = out.read_text()
                seen["doctor"] = await asyncio.to_thread(run_command, data_dir, env, "doctor")
            finally:
                await server.stop()
            seen["server output (every log line)"] = "".join(server.output)
            assert llm.recorded, "the provider was called"
            tried = [
                body for _, path, body in feishu.requests if path.endswith("tenant_access_token/internal")
            ]
            assert tried and tried[0]["app_secret"] == SECRETS["feishu_app_secret"]  # refused by the fake
            assert all(r.headers["authorization"] == f"Bearer {SECRETS['llm_api_key']}" for r in llm.recorded)
    unreachable = f"postgres://picobot:{SECRETS['database_password']}@127.0.0.1:1/picobot"
    malformed = f"postgres://picobot:{SECRETS['database_password']}@db:notaport/picobot"
    for name, url in (("unreachable", unreachable), ("malformed", malformed)):
        seen[f"doctor, {name} database"] = await asyncio.to_thread(
            run_command, data_dir, {"PICOBOT_DATABASE_URL": url}, "doctor", "--no-llm-request"
        )

    assert '"failed"' in seen["websocket frames"] and "HTTP 401" in seen["websocket frames"]  # the path ran
    assert "alice" in seen["export json"] and "Dialogs" in seen["admin pages"]
    found = [
        f"{secret} in {where}: …{text[max(0, text.find(value) - 200) : text.find(value) + 60]!r}…"
        for secret, value in SECRETS.items()
        for where, text in seen.items()
        if value in text
    ]
    found += [
        f"alice's API token in {where}: {line[:300]!r}"
        for where, text in seen.items()
        for line in text.splitlines()
        if token in line
    ]
    assert found == [], "\n".join(found)
