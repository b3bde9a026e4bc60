"""The WebUI's client rules with no DOM (protocol.js, dialogs.js, viewmodel.js), in Chromium.

Unread marks, sidebar paging and search, a typed ``/sessions`` told from the sidebar's own
requests, outcome notes of failed/interrupted/stopped turns from history rows, and a turn that
keeps its keys from the live snapshot to its committed rows (so nothing jumps at commit).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.serve_process import REPO

pytestmark = pytest.mark.e2e

A, B = "cli_chat:1:aaaa1111", "cli_chat:1:bbbb2222"
READY = {
    "type": "ready",
    "user": "alice",
    "chat_id": "1",
    "active_session_id": A,
    "protocol": 1,
    "provider": {},
    "running": [],
}


def dialog(session_id: str, title: str = "t", active: bool = False, at: int = 0) -> dict:
    return {
        "session_id": session_id,
        "dialog_id": session_id[-8:],
        "title": title,
        "last_active_at": at,
        "message_count": 0,
        "active": active,
    }


def row(seq: int, role: str, turn: str, **extra: Any) -> dict:
    base = {"id": f"m{seq}", "seq": seq, "role": role, "content": f"{role} {seq}", "turn_id": turn}
    return {
        "reasoning": None,
        "tool_calls": [],
        "iteration": 0,
        "created_at": 1_764_400_000_000 + seq,
        **base,
        **extra,
    }


def history(session_id: str, *rows: dict) -> dict:
    revision = max((r["seq"] for r in rows), default=0)
    return {
        "type": "session_history",
        "session_id": session_id,
        "history_revision": revision,
        "messages": list(rows),
        "has_more": False,
    }


async def load(page: Any) -> None:
    await page.set_content("<!doctype html><title>rules</title>")
    for name in ("protocol.js", "dialogs.js", "viewmodel.js"):
        await page.add_script_tag(path=str(REPO / "static" / "picobot" / name))


async def run(page: Any, script: str, arg: Any = None) -> Any:
    await load(page)
    return await page.evaluate(script, json.loads(json.dumps(arg)))


async def test_a_dialog_that_gets_rows_while_not_shown_is_unread_until_opened(page: Any) -> None:
    frames = [
        READY,
        {"type": "sessions", "items": [dialog(A, active=True), dialog(B)], "has_more": False, "offset": 0},
        history(A),
        {
            "type": "turn_committed",
            "session_id": A,
            "history_revision": 1,
            "messages": [row(1, "user", "t1")],
        },
        {
            "type": "turn_committed",
            "session_id": B,
            "history_revision": 2,
            "messages": [row(1, "user", "t2"), row(2, "assistant", "t2")],
        },
        {
            "type": "turn_committed",
            "session_id": B,
            "history_revision": 2,
            "messages": [row(2, "assistant", "t2")],
        },
        {"type": "session_changed", "session_id": B, "dialog_id": "bbbb2222", "title": "t", "active": True},
    ]
    log = await run(
        page,
        """(frames) => { const s = new PicoBot.ChatStore();
             return frames.map((f) => { s.apply(f); return [...s.unread].join(','); }); }""",
        frames,
    )
    assert log == ["", "", "", "", B, B, ""], "the shown dialog never; another one until it is opened"


async def test_sidebar_pages_merge_and_a_stale_search_answer_is_dropped(page: Any) -> None:
    result = await run(
        page,
        """([a, b, c]) => {
          const s = new PicoBot.ChatStore();
          const out = {};
          out.first = s.requestDialogs(false);
          s.apply({type: 'sessions', items: [a, b], has_more: true, offset: 0});
          out.more = s.requestDialogs(true);
          out.whileInFlight = s.requestDialogs(true);
          // b moved to the top meanwhile: the next page repeats it, listed once.
          s.apply({type: 'sessions', items: [b, c], has_more: false, offset: 2});
          out.afterPages = s.dialogs.map((d) => d.title);
          out.noMoreLeft = s.requestDialogs(true);
          out.search = s.setQuery('  Ro ');
          s.setQuery('Rom');
          s.apply({type: 'sessions', items: [a], has_more: false, offset: 0, query: 'Ro'});
          out.afterStale = s.dialogs.map((d) => d.title);
          s.apply({type: 'sessions', items: [c], has_more: false, offset: 0, query: 'Rom'});
          out.afterSearch = s.dialogs.map((d) => d.title);
          s.apply({type: 'session_changed', session_id: 'x', dialog_id: 'x', title: 'Taxes', active: true});
          s.apply({type: 'session_changed', session_id: 'y', dialog_id: 'y', title: 'Rome 2', active: true});
          out.afterNew = s.dialogs.map((d) => d.title);
          return out;
        }""",
        [dialog(A, "a"), dialog(B, "b"), dialog("cli_chat:1:cccc3333", "Rome")],
    )
    assert result["first"] == {"type": "sessions", "offset": 0, "limit": 20}
    assert result["more"] == {"type": "sessions", "offset": 2, "limit": 20}
    assert result["whileInFlight"] is None and result["noMoreLeft"] is None
    assert result["afterPages"] == ["a", "b", "Rome"]
    assert result["search"] == {"type": "sessions", "offset": 0, "limit": 20, "query": "Ro"}
    assert result["afterStale"] == ["a", "b", "Rome"], (
        "an answer to a search typed over since changes nothing"
    )
    assert result["afterSearch"] == ["Rome"]
    assert result["afterNew"] == ["Rome 2", "Rome"], (
        "a new (active) dialog is listed only when it matches the search"
    )


async def test_a_typed_sessions_is_a_system_line_and_refreshes_the_sidebar(page: Any) -> None:
    result = await run(
        page,
        """([ready, a, b]) => {
          const s = new PicoBot.ChatStore();
          const sent = s.apply(ready).send;
          s.apply({type: 'session_history', session_id: ready.active_session_id, history_revision: 0, messages: [], has_more: false});
          const cmd = s.command('/sessions');
          const fx = s.apply({type: 'sessions', items: [a], has_more: true, offset: 0}); // the sidebar's, asked first
          const fx2 = s.apply({type: 'sessions', items: [a, b], has_more: false, offset: 0}); // the command's
          const items = s.viewItems();
          return {sent: sent.map((f) => f.type), cmd, refresh: fx2.send, sidebarSend: fx.send,
                  dialogs: s.dialogs.length, lines: items.filter((i) => i.kind === 'system').map((i) => [i.line.kind, i.line.items.length])};
        }""",
        [READY, dialog(A, "a", True), dialog(B, "b")],
    )
    assert result["sent"] == ["history", "sessions"]
    assert (
        result["cmd"]["content"] == "/sessions"
        and result["cmd"]["session_id"] == A
        and result["cmd"]["client_msg_id"]
    )
    assert result["sidebarSend"] == [] and result["dialogs"] == 1
    assert result["refresh"] == [{"type": "sessions", "offset": 0, "limit": 20}]
    assert result["lines"] == [["sessions", 2]]


async def test_outcome_notes_come_from_history_rows_and_say_stopped_once(page: Any) -> None:
    rows = [
        row(
            1, "user", "t1", outcome={"status": "failed", "error": "the model provider could not be reached"}
        ),
        row(2, "user", "t2", outcome={"status": "interrupted", "error": "interrupted by a server restart"}),
        row(3, "user", "t3", outcome={"status": "cancelled", "error": "stopped"}),
        row(4, "assistant", "t3", content="partial", completion_status="cancelled"),
        row(5, "user", "t4"),  # no outcome field (an older server): the row's status speaks
        row(6, "assistant", "t4", content="cut", completion_status="interrupted"),
        row(7, "user", "t5", outcome=None),
        row(8, "assistant", "t5", content="fine", completion_status="completed"),
    ]
    notes = await run(
        page,
        """([ready, hist]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          return s.viewItems().filter((i) => i.kind === 'turn').map((i) => [i.key, i.turn.note && i.turn.note.text, i.turn.canRetry, i.turn.status]);
        }""",
        [READY, history(A, *rows)],
    )
    assert notes == [
        ["t:t1", "Failed: the model provider could not be reached", True, "failed"],
        ["t:t2", "Interrupted by a server restart", True, "interrupted"],
        ["t:t3", "Stopped", False, "cancelled"],
        ["t:t4", "Interrupted", True, "interrupted"],
        ["t:t5", None, False, "completed"],
    ]
    texts = await page.evaluate(
        """() => [PicoBot.View.outcomeText('cancelled', 'stopped'), PicoBot.View.outcomeText('failed', ''),
                  PicoBot.View.noteView({status: 'failed', error: 'interrupted by a server restart'}).text]"""
    )
    assert texts == ["Stopped", "Failed", "Interrupted by a server restart"]


async def test_retry_of_a_failed_turn_sends_its_text_as_a_new_message(page: Any) -> None:
    frames = await run(
        page,
        """([ready, hist]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          return [s.retryTurn('t1'), s.retryTurn('t1'), s.retryTurn('nope')];
        }""",
        [
            READY,
            history(A, row(1, "user", "t1", content="hello?", outcome={"status": "failed", "error": "x"})),
        ],
    )
    first, second, none = frames
    assert first["content"] == second["content"] == "hello?" and first["session_id"] == A
    assert "media" not in first, "a message without images is resent without media"
    assert first["client_msg_id"] != second["client_msg_id"], "every retry is a new message"
    assert none is None


async def test_retry_of_a_failed_turn_with_images_names_them_and_resends_them(page: Any) -> None:
    media = [{"mime_type": "image/png", "url": "/api/dialogs/x/messages/m1/media/0"}]
    source, frame = await run(
        page,
        """([ready, hist]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          const fetched = [{mime_type: 'image/png', data: 'iVBORw0KGgo='}];
          return [s.retrySource('t1'), s.retryTurn('t1', fetched)];
        }""",
        [
            READY,
            history(
                A, row(1, "user", "t1", content="", media=media, outcome={"status": "failed", "error": "x"})
            ),
        ],
    )
    assert source == {"content": "", "media": media}, "the images to fetch back are the row's"
    assert frame["media"] == [{"mime_type": "image/png", "data": "iVBORw0KGgo="}] and frame["content"] == ""


async def test_a_turn_keeps_its_keys_from_live_snapshot_to_committed_rows(page: Any) -> None:
    live = {
        "id": "t1",
        "session_id": A,
        "message_id": "m4",
        "revision": 9,
        "status": "completed",
        "phase": "finalizing",
        "usage": None,
        "error": None,
        "blocks": [
            {"type": "reasoning", "id": "r0", "iteration": 0, "text": "think"},
            {
                "type": "tool",
                "id": "call_1",
                "iteration": 0,
                "name": "current_time",
                "arguments": {},
                "status": "completed",
                "preview": "12:00",
            },
            {"type": "reasoning", "id": "r1", "iteration": 1, "text": "again"},
            {"type": "assistant", "id": "a1", "iteration": 1, "text": "It is noon."},
        ],
    }
    rows = [
        row(1, "user", "t1"),
        row(
            2,
            "assistant",
            "t1",
            content="",
            reasoning="think",
            tool_calls=[{"id": "call_1", "name": "current_time", "arguments": {}}],
        ),
        row(
            3, "tool", "t1", content="12:00", tool_call_id="call_1", tool_name="current_time", is_error=False
        ),
        row(
            4,
            "assistant",
            "t1",
            content="It is noon.",
            reasoning="again",
            iteration=1,
            completion_status="completed",
        ),
    ]
    result = await run(
        page,
        """([ready, hist, live, commit]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          s.apply({type: 'turn_updated', turn: live});
          const shape = () => s.viewItems().map((i) => [i.key, i.kind === 'turn' ? i.turn.blocks.map((b) => b.key) : null]);
          const before = shape();
          s.apply(commit);
          return {before, after: shape(), tool: s.viewItems()[1].turn.blocks[1]};
        }""",
        [
            READY,
            history(A, rows[0]),
            live,
            {"type": "turn_committed", "session_id": A, "history_revision": 4, "messages": rows},
        ],
    )
    assert (
        result["before"]
        == result["after"]
        == [
            ["u:m1", None],
            ["t:t1", ["reasoning:0", "tool:call_1", "reasoning:1", "assistant:1"]],
        ]
    )
    assert result["tool"]["status"] == "completed" and result["tool"]["preview"] == "12:00", (
        "one card: call and result"
    )


async def test_labels_completion_and_friendly_errors(page: Any) -> None:
    await load(page)
    got = await page.evaluate(
        """() => {
          const V = PicoBot.View;
          const now = new Date(2026, 5, 15, 12).getTime();
          const day = 86400000;
          return {
            provider: [V.providerLabel({name: 'replay', model: 'replay'}), V.providerLabel({name: 'openai', model: 'gpt'}), V.providerLabel({name: 'x'})],
            groups: [now - 3600e3, now - day, now - 3 * day, now - 20 * day, new Date(2025, 0, 3).getTime()].map((t) => V.dateGroup(t, now)),
            completion: [V.completions('/'), V.completions('/re'), V.completions('/rename x'), V.completions('hi')].map((l) => l.map((c) => c.name)),
            errors: [V.friendlyError('not_found', 'no such dialog: x'), V.friendlyError('unknown_command', 'unknown command /x; type /help for the list'),
                     V.friendlyError('internal_error', 'the server could not handle this request', 'ab12')],
          };
        }"""
    )
    assert got["provider"] == ["replay", "openai · gpt", "x"]
    assert got["groups"] == ["Today", "Yesterday", "Previous 7 days", "Previous 30 days", "January 2025"]
    assert len(got["completion"][0]) == 12 and got["completion"][1:] == [["/rename"], [], []]
    assert got["errors"][0].startswith("That dialog") and "not_found" not in got["errors"][0]
    assert got["errors"][1] == "Unknown command /x; type /help for the list"
    assert got["errors"][2].endswith("(reference ab12)") and "internal_error" not in got["errors"][2]


def running_turn(turn_id: str, **extra: Any) -> dict:
    return {
        "id": turn_id,
        "session_id": A,
        "message_id": "m1",
        "revision": 1,
        "status": "running",
        "phase": "responding",
        "usage": None,
        "error": None,
        "blocks": [],
        **extra,
    }


async def test_a_turn_cut_off_at_the_output_limit_says_so_live_and_from_history(page: Any) -> None:
    answer = [{"type": "assistant", "id": "a", "iteration": 0, "text": "Half an ans"}]
    thought = [{"type": "reasoning", "id": "r", "iteration": 0, "text": "hmm"}]
    live = [
        running_turn("t1", status="completed", revision=5, blocks=answer, truncated=True),
        running_turn("t2", status="completed", revision=5, blocks=thought, truncated=True),
        running_turn("t3", status="running", revision=5, blocks=answer, truncated=True),
        running_turn("t4", status="completed", revision=5, blocks=answer),  # an older server: no field
    ]
    rows = [
        row(1, "user", "h1"),
        row(2, "assistant", "h1", content="Half", truncated=True),
        row(3, "user", "h2"),
        row(4, "assistant", "h2", content="", reasoning="thinking", truncated=True),
        row(5, "user", "h3"),
        row(6, "assistant", "h3", content="Whole"),
    ]
    got = await run(
        page,
        """([live, ready, hist]) => {
          const fromLive = live.map((t) => PicoBot.View.liveTurn(t, 'q').cutOff);
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          const fromRows = s.viewItems().filter((i) => i.kind === 'turn').map((i) => i.turn.cutOff);
          return {fromLive, fromRows};
        }""",
        [live, READY, history(A, *rows)],
    )
    assert got["fromLive"] == ["answer", "thinking", None, None], "said once the turn ended"
    assert got["fromRows"] == ["answer", "thinking", None]


async def test_a_running_turn_shows_reconnecting_while_the_socket_is_down(page: Any) -> None:
    got = await run(
        page,
        """([ready, hist, turn]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist); s.apply({type: 'turn_updated', turn});
          const phase = () => s.viewItems().find((i) => i.kind === 'turn').turn.phase;
          const out = [phase()];
          s.online = false; out.push(phase());
          s.apply(Object.assign({}, ready, {running: [turn]})); out.push(phase());
          return out;
        }""",
        [READY, history(A, row(1, "user", "t1")), running_turn("t1")],
    )
    assert got == ["responding", "reconnecting", "responding"]


async def test_a_typed_command_is_echoed_just_before_its_answer(page: Any) -> None:
    got = await run(
        page,
        """([ready, hist]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          const shown = () => s.viewItems().map((i) => i.kind === 'system' ? `${i.line.kind}:${i.line.text}` : i.kind);
          for (const cmd of ['/info', '/rename']) {
            const f = s.command(cmd); s.echoCommand(cmd);
            s.apply({type: 'error', code: 'usage', message: 'usage: ' + cmd, client_msg_id: f.client_msg_id});
          }
          return shown();
        }""",
        [READY, history(A, row(1, "user", "t1"), row(2, "assistant", "t1"))],
    )
    assert got == [
        "user",
        "turn",
        "command:/info",
        "error:usage: /info",
        "command:/rename",
        "error:usage: /rename",
    ]


async def test_completion_sends_argumentless_commands_and_images_are_checked_by_their_bytes(
    page: Any,
) -> None:
    await load(page)
    got = await page.evaluate(
        """() => {
          const V = PicoBot.View;
          const instant = Object.fromEntries(V.COMMANDS.map((c) => [c.name, c.instant]));
          const bytes = (text) => new Uint8Array([...text].map((c) => c.charCodeAt(0)));
          const sniff = [
            new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0]), new Uint8Array([0xff, 0xd8, 0xff, 0xe0]),
            bytes('GIF89a....'), bytes('RIFF\\0\\0\\0\\0WEBPVP8 '), bytes('hello, I am text'), new Uint8Array([]),
          ].map(V.sniffImage);
          return {instant, sniff, retry: ['invalid_media', 'content_too_long', 'inbox_full', 'internal_error'].map(V.retryable)};
        }"""
    )
    assert got["instant"] == {
        "/new": True,
        "/sessions": True,
        "/switch": False,
        "/rename": False,
        "/delete": False,
        "/compact": True,
        "/info": True,
        "/model": False,
        "/schedule": False,
        "/tasks": True,
        "/stop": True,
        "/help": True,
    }
    assert got["sniff"] == ["image/png", "image/jpeg", "image/gif", "image/webp", None, None]
    assert got["retry"] == [False, False, True, True], "a refused image never gets a Retry"


async def test_a_message_sent_shows_its_preview_and_count_in_the_sidebar_at_once(page: Any) -> None:
    text = "  Plan   a\ntrip\tto " + "Rome " * 40
    got = await run(
        page,
        """([ready, a, b, text, turn, turnB]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready);
          s.apply({type: 'sessions', items: [a, b], has_more: false, offset: 0});
          s.apply({type: 'session_history', session_id: a.session_id, history_revision: 0, messages: [], has_more: false});
          const item = (id) => { const d = s.dialogs.find((x) => x.session_id === id); return [d.preview, d.message_count]; };
          const out = {};
          const f = s.addPending(text);
          out.sent = item(a.session_id);
          const fx = s.apply({type: 'ack', client_msg_id: f.client_msg_id, message_id: 'm1', session_id: a.session_id, queued: 0});
          out.acked = item(a.session_id); out.render = fx.render;
          s.apply({type: 'ack', client_msg_id: f.client_msg_id, message_id: 'm1', session_id: a.session_id, queued: 0});
          s.apply({type: 'turn_updated', turn});
          out.started = item(a.session_id);
          s.apply({type: 'turn_committed', session_id: a.session_id, history_revision: 2, messages: [
            {id: 'm1', seq: 1, role: 'user', content: text, turn_id: turn.id, created_at: 1},
            {id: 'm2', seq: 2, role: 'assistant', content: 'ok', turn_id: turn.id, created_at: 2}]});
          out.committed = item(a.session_id);
          // A message whose turn starts before its ack arrives; images alone.
          s.apply({type: 'session_changed', session_id: b.session_id, dialog_id: b.dialog_id, title: 'New chat', active: true});
          s.apply({type: 'session_history', session_id: b.session_id, history_revision: 0, messages: [], has_more: false});
          s.addPending('', [{mime_type: 'image/png', data: 'x'}, {mime_type: 'image/png', data: 'y'}]);
          s.apply({type: 'turn_updated', turn: turnB});
          out.imagesStarted = item(b.session_id);
          out.same = PicoBot.previewOf(text);
          return out;
        }""",
        [
            READY,
            {**dialog(A, "New chat", True), "preview": ""},
            {**dialog(B, "New chat"), "preview": ""},
            text,
            running_turn("t1"),
            running_turn("t2", session_id=B, message_id="m9"),
        ],
    )
    preview = got["acked"][0]
    assert got["sent"] == ["", 0], "nothing before the server took it"
    assert preview.startswith("Plan a trip to Rome Rome") and preview.endswith("…") and len(preview) <= 100
    assert got["acked"] == [preview, 1] and got["render"] is True
    assert got["started"] == [preview, 1] and got["committed"] == [preview, 1], "counted once"
    assert got["imagesStarted"] == ["2 images", 1]
    assert got["same"] == preview


async def test_new_only_when_the_dialog_on_screen_is_not_an_empty_new_chat(page: Any) -> None:
    got = await run(
        page,
        """([ready, a, hist]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready);
          const out = [s.newDialogNeeded()]; // history not loaded yet: unknown, so /new
          s.apply({type: 'sessions', items: [a], has_more: false, offset: 0});
          s.apply({type: 'session_history', session_id: a.session_id, history_revision: 0, messages: [], has_more: false});
          out.push(s.newDialogNeeded());
          const f = s.addPending('hi'); out.push(s.newDialogNeeded());
          s.discardPending(f.client_msg_id); out.push(s.newDialogNeeded());
          s.apply({type: 'session_changed', session_id: a.session_id, dialog_id: a.dialog_id, title: 'Taxes', active: true});
          out.push(s.newDialogNeeded());
          s.apply({type: 'session_changed', session_id: a.session_id, dialog_id: a.dialog_id, title: 'New chat', active: true});
          s.apply(hist); out.push(s.newDialogNeeded());
          return out;
        }""",
        [READY, {**dialog(A, "New chat", True), "preview": ""}, history(A, row(1, "user", "t1"))],
    )
    assert got == [True, False, True, False, True, True]


async def test_a_typed_rename_or_new_says_what_it_did_and_the_sidebar_s_says_nothing(page: Any) -> None:
    got = await run(
        page,
        """([ready, hist]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          const a = ready.active_session_id;
          const lines = (id) => s.session(id).system.map((l) => `${l.kind}:${l.text}`);
          const typed = (cmd) => { const f = s.command(cmd); s.echoCommand(cmd); return f; };
          const changed = (title, extra) => s.apply(Object.assign({type: 'session_changed', session_id: a, dialog_id: 'aaaa1111', title, active: true}, extra || {}));
          typed('/rename  Trip to Rome '); changed('Trip to Rome');
          s.command('/rename Sidebar one', a); changed('Sidebar one'); // the sidebar's inline rename
          const bad = typed('/rename x'); s.apply({type: 'error', code: 'usage', message: 'no', client_msg_id: bad.client_msg_id});
          changed('Another tab');
          typed('/new');
          s.apply({type: 'session_changed', session_id: 'cli_chat:1:cccc3333', dialog_id: 'cccc3333', title: 'New chat', active: true});
          return {a: lines(a), fresh: lines('cli_chat:1:cccc3333')};
        }""",
        [READY, history(A, row(1, "user", "t1"), row(2, "assistant", "t1"))],
    )
    assert got["a"] == [
        "command:/rename  Trip to Rome",
        "notice:Renamed to “Trip to Rome”.",
        "command:/rename x",
        "error:no",
        "command:/new",
        "notice:New dialog started.",
    ]
    assert got["fresh"] == []


async def test_an_answer_kept_at_a_restart_says_its_last_seconds_are_missing(page: Any) -> None:
    interrupted = {"status": "interrupted", "error": "interrupted by a server restart"}
    notes = await run(
        page,
        """([ready, hist]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          return s.viewItems().filter((i) => i.kind === 'turn').map((i) => i.turn.note && i.turn.note.text);
        }""",
        [
            READY,
            history(
                A,
                row(1, "user", "t1", outcome=interrupted),
                row(2, "assistant", "t1", content="half an ans", completion_status="interrupted"),
                row(3, "user", "t2", outcome=interrupted),
                row(4, "user", "t3"),
                row(5, "assistant", "t3", content="cut", completion_status="interrupted"),
            ),
        ],
    )
    assert notes == [
        "Interrupted by a server restart — the answer is kept as of shortly before the restart.",
        "Interrupted by a server restart",
        "Interrupted",
    ]


async def test_automated_user_rows_carry_their_origin_mark(page: Any) -> None:
    rows = [
        row(1, "user", "t1", origin={"kind": "schedule", "ref": "3", "label": "Scheduled (0 9 * * *): news"}),
        row(2, "assistant", "t1", content="news", completion_status="completed"),
        row(3, "user", "t2", origin={"kind": "task_notification", "ref": "9", "label": ""}),
        row(4, "user", "t3", origin=None),
        row(5, "user", "t4"),  # an older server sends no origin
    ]
    marks = await run(
        page,
        """([ready, hist]) => {
          const s = new PicoBot.ChatStore();
          s.apply(ready); s.apply(hist);
          return s.viewItems().filter((i) => i.kind === 'user').map((i) => i.origin);
        }""",
        [READY, history(A, *rows)],
    )
    assert marks == ["⏰ Scheduled (0 9 * * *): news", "⚙ Background task", None, None]
