"""The OpenAI-compatible endpoint in the real ``manage.py serve``, with the official ``openai`` SDK
as the client (issue 18, Must show 2).

The model behind PicoBot is a local OpenAI-compatible server whose answers depend on the
request: "time?" makes it call the built-in ``current_time`` tool, a tool result makes it answer,
"hold" makes it reason and then hang (so a client can leave mid-turn).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import openai
import pytest

from providers.testing import (
    LocalSSEServer,
    RecordedRequest,
    SSEResponse,
    openai_events,
    split_events,
    sse_body,
)
from tests.e2e.serve_process import ServeProcess, manage, openai_env

pytestmark = [pytest.mark.e2e]

PRESET = "default"  # without PICOBOT_CONFIG the PICOBOT_LLM_* settings are the preset "default"


def upstream(request: RecordedRequest) -> SSEResponse:
    """The scripted model: a tool call, the answer after it, a hanging turn, or a plain answer."""
    messages = request.json()["messages"]
    last_user = next(m for m in reversed(messages) if m["role"] == "user")
    text = last_user["content"] if isinstance(last_user["content"], str) else str(last_user["content"])
    if messages[-1]["role"] == "tool":
        events = openai_events("It is noon by the tool.", reasoning="The tool answered.")
    elif "time?" in text:
        events = openai_events(reasoning="Ask the clock.", tool_calls=[("call_1", "current_time", "{}")])
    elif "hold" in text:
        pieces = split_events(sse_body(openai_events(reasoning="thinking very hard", text="never said")))
        return SSEResponse(pieces=pieces, stall_after=4, delay=0.01)  # role + 3 reasoning words
    else:
        events = openai_events("plain answer", reasoning="Nothing to think about.")
    return SSEResponse(pieces=split_events(sse_body(events)), delay=0.01)


async def history(server: ServeProcess, token: str, session_id: str) -> list[dict]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        answer = await http.get(server.url + f"api/dialogs/{session_id}/messages")
        answer.raise_for_status()
        return answer.json()["messages"]


async def dialog_titles(server: ServeProcess, token: str) -> list[str]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        return [item["title"] for item in (await http.get(server.url + "api/dialogs")).json()["items"]]


async def test_openai_sdk_talks_to_the_agent_through_v1(tmp_path: Path):
    manage(tmp_path, "migrate", "--noinput")
    token = manage(tmp_path, "createtoken", "alice").strip().splitlines()[-1]
    async with LocalSSEServer(handler=upstream) as llm, ServeProcess(tmp_path, openai_env(llm)) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "v1", api_key=token, max_retries=0)
        before = await dialog_titles(server, token)

        listed = await client.models.list()
        assert [m.id for m in listed.data] == [PRESET]

        # Non-streaming, with a tool the agent runs on the server and a system message.
        answer = await client.chat.completions.create(
            model=PRESET,
            messages=[
                {"role": "system", "content": "Answer like a pirate."},
                {"role": "user", "content": "Earlier question"},
                {"role": "assistant", "content": "Earlier answer"},
                {"role": "user", "content": "What time?"},
            ],
        )
        choice = answer.choices[0]
        assert choice.message.content == "It is noon by the tool."
        assert choice.message.reasoning_content == "Ask the clock.\n\nThe tool answered."
        assert choice.finish_reason == "stop" and choice.message.tool_calls is None
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (20, 10)  # two calls
        first, second = llm.requests[0]["messages"], llm.requests[1]["messages"]
        assert "Instructions from the client for this turn:\nAnswer like a pirate." in first[0]["content"]
        assert [(m["role"], m["content"]) for m in first[1:3]] == [
            ("user", "Earlier question"),
            ("assistant", "Earlier answer"),
        ]
        assert (
            second[-1]["role"] == "tool" and second[-2]["tool_calls"][0]["function"]["name"] == "current_time"
        )

        # Streaming: reasoning and content deltas, finish, usage chunk.
        stream = await client.chat.completions.create(
            model=PRESET,
            messages=[{"role": "user", "content": "hello"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert (
            "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "Nothing to think about."
        )
        assert "".join(d.content or "" for d in deltas) == "plain answer"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 15

        # One-request dialogs leave nothing in the user's list.
        assert await dialog_titles(server, token) == before

        # A named dialog is kept, listed, and continued with its own history.
        for text in ("hello", "hello again"):
            raw = await client.chat.completions.with_raw_response.create(
                model=PRESET,
                messages=[{"role": "user", "content": text}],
                extra_headers={"X-PicoBot-Dialog": "API notes"},
            )
            assert raw.parse().choices[0].message.content == "plain answer"
        session_id = raw.headers["x-picobot-dialog-id"]
        assert "API notes" in await dialog_titles(server, token)
        rows = await history(server, token, session_id)
        assert [(r["role"], r["content"]) for r in rows] == [
            ("user", "hello"),
            ("assistant", "plain answer"),
            ("user", "hello again"),
            ("assistant", "plain answer"),
        ]
        assert [m["role"] for m in llm.requests[-1]["messages"]] == ["system", "user", "assistant", "user"]

        # A client that leaves mid-turn stops it: the turn ends cancelled, history shows it.
        calls = len(llm.requests)
        async with await client.chat.completions.create(
            model=PRESET,
            messages=[{"role": "user", "content": "hold on"}],
            stream=True,
            extra_headers={"X-PicoBot-Dialog": "API notes"},
        ) as held:
            async for chunk in held:
                if chunk.choices and getattr(chunk.choices[0].delta, "reasoning_content", None):
                    break  # the turn is running: leave
        for _ in range(100):
            rows = await history(server, token, session_id)
            if rows[-1]["role"] == "assistant" and rows[-1]["completion_status"] == "cancelled":
                break
            await asyncio.sleep(0.1)
        assert rows[-2]["content"] == "hold on" and rows[-2]["outcome"]["status"] == "cancelled"
        assert rows[-1]["completion_status"] == "cancelled" and rows[-1]["reasoning"].startswith("thinking")
        assert len(llm.requests) == calls + 1

        await client.close()


async def test_openai_errors_come_in_openais_shape(tmp_path: Path):
    manage(tmp_path, "migrate", "--noinput")
    token = manage(tmp_path, "createtoken", "bob").strip().splitlines()[-1]
    async with LocalSSEServer(handler=upstream) as llm, ServeProcess(tmp_path, openai_env(llm)) as server:
        base = server.url + "v1"
        bad = openai.AsyncOpenAI(base_url=base, api_key="pb_not_a_token", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as refused:
            await bad.chat.completions.create(model=PRESET, messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"
        assert set(refused.value.body) == {"message", "type", "param", "code"}

        client = openai.AsyncOpenAI(base_url=base, api_key=token, max_retries=0)
        with pytest.raises(openai.NotFoundError) as unknown:
            await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert unknown.value.code == "model_not_found" and unknown.value.body["param"] == "model"

        with pytest.raises(openai.BadRequestError) as tools:
            await client.chat.completions.create(
                model=PRESET,
                messages=[{"role": "user", "content": "hi"}],
                tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            )
        assert tools.value.body["param"] == "tools" and "client-side tools" in tools.value.message

        with pytest.raises(openai.BadRequestError) as last:
            await client.chat.completions.create(
                model=PRESET, messages=[{"role": "assistant", "content": "hi"}]
            )
        assert last.value.body["type"] == "invalid_request_error" and last.value.body["param"] == "messages"

        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
            broken = await http.post(
                base + "/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
            )
            assert broken.status_code == 400
            assert broken.json()["error"]["type"] == "invalid_request_error"
            elsewhere = await http.get(base + "/embeddings", follow_redirects=False)
            assert elsewhere.status_code == 404 and elsewhere.json()["error"]["code"] == "unknown_url"
        assert llm.requests == []  # nothing reached the model
        await client.close()
        await bad.close()
