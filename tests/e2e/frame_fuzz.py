"""Hypothesis strategies for random and mutated cli_chat client frames (PROTOCOL §1), and the
cross-user leak check of the fuzz test (``test_fuzz_frames.py``, issue 16).

``raw_frames(own, other, marker)`` draws what goes on the wire: a ``str`` (a text frame) or
``bytes`` (a binary frame). Valid frames of every client type are the seeds; a mutation then
swaps a field for a wrong type, a huge or negative integer, deep nesting, unusual Unicode (lone
surrogates as JSON escapes, NUL, right-to-left marks, astral characters), another user's ids, or
drops, adds or renames fields; some frames are random text, broken JSON, oversized, or binary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

CLIENT_TYPES = ("message", "stop", "history", "sessions", "seen", "ping")
# Keys whose values the server assigns (never echoes of what a client sent).
ASSIGNED_ID_KEYS = frozenset({"session_id", "dialog_id", "message_id", "turn_id", "active_session_id", "id"})


@dataclass
class KnownIds:
    """One user's server-assigned ids, as collected from its frames."""

    session_ids: set[str] = field(default_factory=set)
    dialog_ids: set[str] = field(default_factory=set)
    message_ids: set[str] = field(default_factory=set)
    turn_ids: set[str] = field(default_factory=set)

    def all(self) -> set[str]:
        return self.session_ids | self.dialog_ids | self.message_ids | self.turn_ids

    def learn(self, frame: Any) -> None:
        """Adds the ids found anywhere in a server frame of this user."""
        for key, value in walk(frame):
            if key == "session_id" or key == "active_session_id":
                self.session_ids.add(value)
            elif key == "dialog_id":
                self.dialog_ids.add(value)
            elif key == "message_id":
                self.message_ids.add(value)
            elif key == "turn_id":
                self.turn_ids.add(value)
        if isinstance(frame, dict) and isinstance(frame.get("turn"), dict):
            self.turn_ids.add(frame["turn"].get("id"))
        for message in frame.get("messages") or [] if isinstance(frame, dict) else []:
            if isinstance(message, dict):
                self.message_ids.add(message.get("id"))


def walk(value: Any, key: str = "") -> list[tuple[str, str]]:
    """Every (key, string value) pair inside a decoded JSON value (list items keep their key)."""
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            found += walk(v, k)
    elif isinstance(value, list):
        for v in value:
            found += walk(v, key)
    elif isinstance(value, str):
        found.append((key, value))
    return found


def leaks(frame: dict, other: KnownIds, other_marker: str) -> list[str]:
    """What of another user a frame shows: that user's marker anywhere (they are secret to this
    user, so never an echo), and that user's ids in server-assigned fields (an error frame only
    echoes what this user sent, so its ids are not looked at)."""
    found = [value for _, value in walk(frame) if other_marker in value]
    if frame.get("type") != "error":
        ids = other.all()
        found += [f"{key}={value}" for key, value in walk(frame) if key in ASSIGNED_ID_KEYS and value in ids]
    return found


# --- strategies -----------------------------------------------------------------------------------

ODD_TEXT = st.sampled_from(
    ["", " ", "\x00", "a\x00b", "\ud800", "\udfff", "\ud83d\ude00", "\u202e", "\ufeff", "\U0001f600" * 40,
     "/", "/new", "/delete", "/switch", "/rename", "/stop", "/compact", "/info", "/help", "/unknown x",
     "null", "\n\n", "\t", "ǅ" * 70, "x" * 65, "x" * 201]
)  # fmt: skip
HUGE_INTS = st.sampled_from([-1, 0, 2**31, 2**53, 2**53 + 1, 2**63, 2**64, -(2**63) - 1, 10**30, 2**1000])
FLOATS = st.floats(allow_nan=True, allow_infinity=True)


def nested(depth: int) -> Any:
    value: Any = "deep"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


NESTING = st.integers(min_value=2, max_value=400).map(nested)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), HUGE_INTS, FLOATS, st.text(max_size=40), ODD_TEXT
)
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)  # fmt: skip


def one_of_ids(ids: Any) -> st.SearchStrategy[str]:
    """One of ``ids()`` (``"none"`` while it is empty). The ids are learnt as the fuzz runs, so
    the draw is an index and the id is looked up after it: hypothesis sees the same draws."""

    def choose(index: int) -> str:
        known = sorted(ids())
        return known[index % len(known)] if known else "none"

    return st.integers(min_value=0, max_value=2**16).map(choose)


def valid_frames(own: KnownIds, marker: str) -> st.SearchStrategy[dict]:
    """A well-formed frame of each client type, on this user's own ids where it names one."""

    def pick(ids: set[str]) -> st.SearchStrategy[str]:
        return one_of_ids(lambda: ids)

    content = st.builds(lambda t: f"{marker} {t}", st.text(max_size=30)) | st.sampled_from(
        [f"/new {marker} title", f"/rename {marker} renamed", "/sessions", "/info", "/help", "/stop"]
    )
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("message"), "content": content},
            optional={"session_id": pick(own.session_ids), "client_msg_id": st.uuids().map(str)},
        ),
        st.fixed_dictionaries(
            {"type": st.just("stop"), "session_id": pick(own.session_ids)},
            optional={"turn_id": pick(own.turn_ids)},
        ),
        st.fixed_dictionaries(
            {"type": st.just("history"), "session_id": pick(own.session_ids)},
            optional={"before_seq": st.integers(0, 50), "limit": st.integers(1, 200)},
        ),
        st.fixed_dictionaries(
            {"type": st.just("sessions")},
            optional={
                "limit": st.integers(1, 100),
                "offset": st.integers(0, 20),
                "query": st.text(max_size=10),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("seen"), "turn_id": pick(own.turn_ids), "revision": st.integers(0, 100)}
        ),
        st.fixed_dictionaries({"type": st.just("ping")}, optional={"nonce": st.text(max_size=10)}),
    )


@st.composite
def mutated(draw: st.DrawFn, own: KnownIds, other: KnownIds, marker: str) -> Any:
    """A valid frame with one to three mutations."""
    frame: Any = draw(valid_frames(own, marker))
    for _ in range(draw(st.integers(1, 3))):
        if not isinstance(frame, dict) or not frame:
            break
        keys = sorted(frame)
        key = draw(st.sampled_from(keys))
        how = draw(st.sampled_from(["value", "other_id", "drop", "add", "type", "nest", "wrap", "huge"]))
        if how == "value":
            frame[key] = draw(ANY_JSON)
        elif how == "other_id":
            target = draw(st.sampled_from(["session_id", "turn_id", "client_msg_id", "content", key]))
            frame[target] = draw(one_of_ids(other.all))
            if target == "content":
                frame[target] = draw(st.sampled_from(["/switch ", "/delete ", "/rename "])) + frame[target]
        elif how == "drop":
            frame.pop(key)
        elif how == "add":
            frame[draw(st.text(max_size=12))] = draw(ANY_JSON)
        elif how == "type":
            frame["type"] = draw(st.sampled_from(CLIENT_TYPES) | st.text(max_size=12) | SCALARS)
        elif how == "nest":
            frame[key] = draw(NESTING)
        elif how == "wrap":
            frame = draw(st.sampled_from([[frame], {"frame": frame}, frame.get("type")]))
        else:
            frame[key] = draw(HUGE_INTS)
    return frame


def encode(value: Any, ascii_only: bool) -> str:
    """JSON text of ``value``; lone surrogates can only travel as escapes (ensure_ascii)."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    try:
        text.encode()
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True)
    return text


@st.composite
def raw_frames(draw: st.DrawFn, own: KnownIds, other: KnownIds, marker: str) -> str | bytes:
    """One wire frame: mostly mutated frames, some valid, some random text, JSON or bytes."""
    kind = draw(
        st.sampled_from(["mutated"] * 6 + ["valid", "random_json", "text", "broken", "big", "binary"])
    )
    if kind == "binary":
        return draw(st.binary(max_size=64))
    if kind == "text":
        return encode(draw(st.text(max_size=60)), ascii_only=True)[1:-1] or " "
    if kind == "random_json":
        return encode(draw(ANY_JSON), ascii_only=draw(st.booleans()))
    if kind == "valid":
        return encode(draw(valid_frames(own, marker)), ascii_only=draw(st.booleans()))
    frame = draw(mutated(own, other, marker))
    text = encode(frame, ascii_only=draw(st.booleans()))
    if kind == "broken":
        # A draw whose bounds do not depend on the text: its length follows the ids the server
        # assigned so far, and hypothesis refuses a strategy whose draws change with outside state.
        cut = draw(st.integers(0, 2**16)) % max(1, len(text))
        return text[:cut] + draw(st.sampled_from(["", "}", "{", '"', "\\", "\\u12", ",]"]))
    if kind == "big":  # over 64 KiB of JSON (or of text that is not JSON)
        size = draw(st.sampled_from([64 * 1024 + 1, 70_000, 200_000]))
        return encode({"type": "message", "content": "x" * size, "pad": frame}, ascii_only=True)
    return text
