"""ThinkTagSplitter: tags cut anywhere, whitespace rules, split invariance (SC-01, SC-02)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.think import ThinkTagSplitter


def run(pieces: list[str], **kwargs) -> list[tuple[str, str]]:
    """Feed pieces, flush, and merge adjacent pieces of the same kind."""
    splitter = ThinkTagSplitter(**kwargs)
    out: list[tuple[str, str]] = []
    for piece in [*(p for text in pieces for p in splitter.feed(text)), *splitter.flush()]:
        assert piece[1], "no empty pieces"
        if out and out[-1][0] == piece[0]:
            out[-1] = (piece[0], out[-1][1] + piece[1])
        else:
            out.append(piece)
    return out


def test_sc01_split_tags_become_reasoning_and_the_trailing_lt_is_text() -> None:
    pieces = ["", "<thi", "nk>\nThe user", " only said hi.</th", "ink>\n\nHi! Fun fact: 2 <", " 3."]
    assert run(pieces) == [("reasoning", "The user only said hi."), ("text", "Hi! Fun fact: 2 < 3.")]


def test_sc02_implicit_start_ends_at_the_first_closing_tag() -> None:
    pieces = ["Okay, the user", " asks for 2+2.", "\n</think>", "\n\n2 + 2 = 4."]
    assert run(pieces, implicit_start=True) == [
        ("reasoning", "Okay, the user asks for 2+2."),
        ("text", "2 + 2 = 4."),
    ]


def test_implicit_start_without_a_closing_tag_is_all_reasoning() -> None:
    assert run(["just thinking  "], implicit_start=True) == [("reasoning", "just thinking")]


def test_other_tag_names_and_several_spans() -> None:
    text = "A <thought> one </thought> B <reasoning>two</reasoning>C"
    assert run([text]) == [
        ("text", "A "),
        ("reasoning", "one"),
        ("text", "B "),
        ("reasoning", "two"),
        ("text", "C"),
    ]


def test_a_span_closes_only_at_its_own_tag() -> None:
    assert run(["<think>a </thought> b</think>x"]) == [("reasoning", "a </thought> b"), ("text", "x")]


def test_held_back_text_is_only_a_possible_tag_prefix() -> None:
    splitter = ThinkTagSplitter()
    assert splitter.feed("a <b> c <th") == [("text", "a <b> c ")]
    assert splitter.feed("x") == [("text", "<thx")]


def test_trailing_reasoning_whitespace_is_held_until_more_reasoning_arrives() -> None:
    splitter = ThinkTagSplitter()
    assert splitter.feed("<think> one  ") == [("reasoning", "one")]
    assert splitter.feed("\n") == []
    assert splitter.feed("two") == [("reasoning", "  \ntwo")]
    assert splitter.feed(" </think>  ") == []
    assert splitter.feed(" three") == [("text", "three")]


def test_flush_resets_for_reuse() -> None:
    splitter = ThinkTagSplitter()
    splitter.feed("<think>x")
    splitter.flush()
    assert splitter.feed("plain") == [("text", "plain")]


def test_needs_a_tag() -> None:
    with pytest.raises(ValueError):
        ThinkTagSplitter(tags=())


alphabet = st.sampled_from(
    ["<think>", "</think>", "<thought>", "</thought>", "<", ">", "/", "t", "hink", " ", "\n", "a", "é", "🌍"]
)


@settings(max_examples=300)
@given(st.lists(alphabet, max_size=25).map("".join), st.data(), st.booleans())
def test_any_split_gives_the_same_output(text: str, data, implicit: bool) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert run(pieces, implicit_start=implicit) == run([text], implicit_start=implicit)
    assert run(list(text), implicit_start=implicit) == run([text], implicit_start=implicit)


@given(st.text(alphabet=st.characters(blacklist_characters="<")))
def test_text_without_tags_passes_through_unchanged(text: str) -> None:
    assert run([text]) == ([("text", text)] if text else [])
