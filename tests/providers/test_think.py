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


def test_implicit_start_without_a_closing_tag_is_text() -> None:
    # SC-02: the span is held until "</think>" or the end; no closing tag means no thinking.
    assert run(["Hello there, ", "no thinking."], implicit_start=True) == [
        ("text", "Hello there, no thinking.")
    ]


def test_implicit_start_text_is_held_until_the_closing_tag() -> None:
    splitter = ThinkTagSplitter(implicit_start=True)
    assert splitter.feed("reasoning so far") == []
    assert splitter.feed("</think>\nAns") == [("reasoning", "reasoning so far"), ("text", "Ans")]


def test_implicit_start_on_failure_releases_the_held_span_as_reasoning() -> None:
    splitter = ThinkTagSplitter(implicit_start=True)
    splitter.feed("half a thought")
    assert splitter.flush(failed=True) == [("reasoning", "half a thought")]


def test_implicit_start_swallows_an_explicit_opening_tag() -> None:
    assert run(["<think>\nr\n</think>\n\nAns"], implicit_start=True) == [
        ("reasoning", "r"),
        ("text", "Ans"),
    ]
    assert run(["  <thi", "nk>r</think>Ans"], implicit_start=True) == [("reasoning", "r"), ("text", "Ans")]
    # Not at the start: literal inside the span.
    assert run(["a <think> b</think>c"], implicit_start=True) == [("reasoning", "a <think> b"), ("text", "c")]


def test_cancel_implicit_start_releases_held_text_as_text() -> None:
    splitter = ThinkTagSplitter(implicit_start=True)
    assert splitter.cancel_implicit_start() == []
    assert splitter.feed("The answer.</think>") == [("text", "The answer.</think>")]


def test_held_tag_prefix_is_dropped_on_failure_and_never_reasoning() -> None:
    splitter = ThinkTagSplitter()
    assert splitter.feed("Hello <thi") == [("text", "Hello ")]
    assert splitter.flush(failed=True) == []
    assert splitter.feed("2 <") == [("text", "2 ")]
    assert splitter.flush(failed=True) == [("text", "<")]  # a lone "<" is kept as text (SC-01)
    assert splitter.feed("<think>abc</thi") == [("reasoning", "abc")]
    assert splitter.flush() == []


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


def test_an_explicit_unclosed_think_span_stays_reasoning_in_implicit_start_mode():
    from providers.think import ThinkTagSplitter

    splitter = ThinkTagSplitter(implicit_start=True)
    pieces = splitter.feed("<think>r only") + splitter.flush()
    assert "".join(t for k, t in pieces if k == "text") == ""
    assert "".join(t for k, t in pieces if k == "reasoning").strip() == "r only"
    # Without the explicit tag and without a closing one, the held text is the answer (SC-02 rule).
    splitter = ThinkTagSplitter(implicit_start=True)
    pieces = splitter.feed("just an answer") + splitter.flush()
    assert "".join(t for k, t in pieces if k == "text") == "just an answer"
