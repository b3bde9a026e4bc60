"""split_markdown: parts within the budget, nothing lost, no fence or character cut open."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delivery.platforms.feishu.cards import CARD_TEXT_BUDGET, text_size
from delivery.platforms.feishu.split import is_cut_allowed, split_markdown, split_markdown_parts


def utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def json_bytes(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def fences_balanced(text: str) -> bool:
    """Every fence opened in ``text`` is closed again (a simple line scan, like a renderer)."""
    open_marker = None
    for line in text.split("\n"):
        stripped = line.strip()
        if open_marker is None:
            if stripped.startswith(("```", "~~~")):
                char = stripped[0]
                marker = stripped[: len(stripped) - len(stripped.lstrip(char))]
                if not (char == "`" and "`" in stripped[len(marker) :]):
                    open_marker = marker
        elif stripped and stripped == open_marker[0] * len(stripped) and len(stripped) >= len(open_marker):
            open_marker = None
    return open_marker is None


def check(text: str, budget: int, measure=utf8) -> list:
    parts = split_markdown_parts(text, budget, measure)
    assert "".join(part.body for part in parts) == text
    assert [p.text for p in parts] == split_markdown(text, budget, measure)
    for part in parts:
        assert part.body, "no empty part"
        assert measure(part.text) <= budget, (measure(part.text), part)
    cut = 0
    for before, after in zip(parts, parts[1:], strict=False):
        cut += len(before.body)
        assert is_cut_allowed(text, cut), repr(text[cut - 2 : cut + 2])
        assert bool(before.close) == bool(after.reopen)
    return parts


def test_a_text_that_fits_is_one_part_and_empty_text_none():
    assert split_markdown("hello\n\nworld", 100, utf8) == ["hello\n\nworld"]
    assert split_markdown("", 100, utf8) == []


def test_paragraph_boundaries_are_preferred_over_line_boundaries():
    text = "aaaa\nbbbb\n\ncccc\ndddd\n"
    parts = check(text, 16)
    assert parts[0].body == "aaaa\nbbbb\n\n"


def test_a_code_fence_that_fits_is_never_cut():
    fence = "```python\n" + "".join(f"x = {i}\n" for i in range(8)) + "```\n"
    text = "intro line\n" * 5 + fence + "outro\n"
    parts = check(text, len(fence) + 10)
    assert any(fence in part.body for part in parts)
    assert all(not part.close and not part.reopen for part in parts)


def test_an_oversized_fence_is_closed_and_reopened_with_its_language():
    fence = "~~~~js\n" + "".join(f"console.log({i});\n" for i in range(60)) + "~~~~\n"
    parts = check("Look:\n\n" + fence + "\nDone.\n", 200)
    assert len(parts) > 2
    for part in parts:
        assert fences_balanced(part.text), part.text
    assert parts[0].close == "~~~~"
    assert all(p.reopen == "~~~~js\n" for p in parts[1:-1])


def test_an_unclosed_fence_at_the_end_is_cut_and_reopened():
    text = "```\n" + "line\n" * 100
    parts = check(text, 80)
    assert all(p.reopen == "```\n" for p in parts[1:])
    assert all(p.close == "```" for p in parts[:-1])


def test_inline_triple_backticks_are_not_a_fence():
    text = "use ```x``` here\n" + "word " * 100
    assert all(not p.close for p in check(text, 60))


def test_a_long_line_is_cut_after_a_space_or_between_characters():
    words = check("word " * 100, 50)
    assert all(p.body.endswith(" ") for p in words[:-1])
    check("x" * 500, 64)
    cjk = check("汉字" * 300, 100)
    assert all(len(p.body.encode()) <= 100 for p in cjk)


@pytest.mark.parametrize(
    "cluster",
    [
        "e\u0301",  # combining acute
        "👍🏽",  # skin tone modifier
        "👨\u200d👩\u200d👧\u200d👦",  # ZWJ family
        "❤️",  # variation selector
        "🇫🇷",  # flag: two regional indicators
        "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",  # tag sequence
        "\r\n",
    ],
)
def test_a_character_and_what_extends_it_stay_together(cluster):
    text = cluster * 200
    for budget in (len(cluster.encode()) * 3 + 1, 37, 100):
        for part in check(text, budget):
            assert part.body.startswith(cluster) and len(part.body) % len(cluster) == 0


def test_a_budget_smaller_than_a_character_still_makes_progress():
    parts = split_markdown_parts("👨\u200d👩\u200d👧" * 3, 4, utf8)
    assert "".join(p.body for p in parts) == "👨\u200d👩\u200d👧" * 3
    assert [p.body for p in parts] == ["👨\u200d👩\u200d👧"] * 3


def test_forty_thousand_characters_with_fences_cjk_and_emoji_split_into_cards():
    rng = random.Random(3)
    chunks = []
    while sum(map(len, chunks)) < 40_000:
        roll = rng.random()
        if roll < 0.2:
            lang = rng.choice(["python", "js", "", "bash"])
            body = "".join(
                f"    print('行 {i} 🚀')  # {'x' * rng.randint(0, 60)}\n" for i in range(rng.randint(3, 400))
            )
            chunks.append(f"```{lang}\n{body}```\n\n")
        elif roll < 0.4:
            chunks.append("## 标题 " + "汉字" * rng.randint(1, 20) + "\n\n")
        elif roll < 0.6:
            chunks.append(
                "".join(rng.choice(["👍🏽", "🇯🇵", "e\u0301", "❤️", "👩\u200d💻"]) for _ in range(50)) + "\n"
            )
        else:
            chunks.append(
                " ".join("word" + str(rng.randint(0, 99)) for _ in range(rng.randint(5, 80))) + "\n\n"
            )
    text = "".join(chunks)
    assert len(text) >= 40_000
    parts = check(text, CARD_TEXT_BUDGET, text_size)
    assert len(parts) >= 2
    for part in parts:
        assert fences_balanced(part.text)


_TOKENS = st.sampled_from(
    [
        "word",
        " ",
        "\n",
        "\n\n",
        "汉字",
        "👍🏽",
        "🇫🇷",
        "e\u0301",
        "👩\u200d💻",
        "❤️",
        "# head\n",
        '"q"',
        "\\",
        "\t",
    ]
)


@st.composite
def markdown(draw):
    pieces = []
    for _ in range(draw(st.integers(0, 30))):
        if draw(st.booleans()):
            pieces.append(draw(_TOKENS) * draw(st.integers(1, 40)))
        else:
            marker = draw(st.sampled_from(["```", "````", "~~~"]))
            lang = draw(st.sampled_from(["", "py", "c++"]))
            body = "".join(draw(_TOKENS) for _ in range(draw(st.integers(0, 60))))
            body = body.replace("`", "'").replace("~", "-")
            closed = draw(st.booleans())
            pieces.append(f"\n{marker}{lang}\n{body}\n" + (f"{marker}\n" if closed else ""))
    return "".join(pieces)


@given(text=markdown(), budget=st.integers(60, 400))
def test_splitting_loses_nothing_and_keeps_every_part_within_the_budget(text, budget):
    parts = check(text, budget, json_bytes)
    for part in parts:
        assert fences_balanced(part.text) or part is parts[-1]


@given(text=st.text(max_size=300), budget=st.integers(1, 80))
def test_splitting_any_text_loses_nothing(text, budget):
    parts = split_markdown_parts(text, budget, utf8)
    assert "".join(p.body for p in parts) == text
    assert all(p.body for p in parts)


@pytest.mark.parametrize(
    "text",
    [
        "\n```\n\n\n```\n\n```py\n" + "word" * 28 + "\n" + "👍🏽" * 16 + "\n```\n\n",
        "wordword\n" + "```\n\n\n```\n\n\n" * 4 + "````\nwordword" + "👍🏽" * 5 + "\n````\n",
        "```python title here\n" + "x " * 40 + "\n```\n",
    ],
)
def test_a_cut_inside_a_fence_never_splits_its_opening_or_closing_marker(text):
    # The first two were found by the property above (a fence's last line cut inside "```").
    parts = check(text, 60, json_bytes)
    assert all(fences_balanced(part.text) for part in parts)
    assert not any(part.body.startswith(("``\n", "`\n")) for part in parts)
