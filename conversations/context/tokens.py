"""Token estimates of provider messages, without a tokenizer (seed 002 Task 6 §6a–§6b).

Every number here is a count of **tokens**. The estimate decides when a turn's input is
compacted (``turn_input``); it has to be cheap (it runs over the whole input of every turn) and on
the safe side (a request estimated to fit that does not costs an overflow round trip, seed 000
§7.2), so it errs towards too many tokens. Per character: ASCII 1/3.5, CJK 1, other BMP 1/2,
other astral 2; fixed overheads per message, tool call, tool result, image and request. The
figures and where they come from: ``context/README.md``. Cost: O(length of the text), with a fast
path for pure ASCII. Pure module: no Django, no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence

from providers.blocks import (
    ContentBlock,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from providers.json_depth import value_too_deep
from providers.messages import Message, ToolDefinition

__all__ = [
    "ASCII_CHARS_PER_TOKEN",
    "ASTRAL_TOKENS",
    "CJK_RANGES",
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD",
    "REQUEST_OVERHEAD",
    "TOOL_RESULT_OVERHEAD",
    "TOOL_USE_OVERHEAD",
    "estimate_block",
    "estimate_message",
    "estimate_messages",
    "estimate_request",
    "estimate_text",
    "estimate_tools",
]

ASCII_CHARS_PER_TOKEN = 3.5
ASTRAL_TOKENS = 2
MESSAGE_OVERHEAD = 4
TOOL_USE_OVERHEAD = 30  # the call id, the function name and the wrapping (``context/README.md``)
TOOL_RESULT_OVERHEAD = 6  # the call id and the wrapping
IMAGE_TOKENS = 1500
REQUEST_OVERHEAD = 3  # the reply primer every request carries
TOOL_DEFINITION_OVERHEAD = 8

#: Code point ranges counted as one token per character.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x2FF0, 0x303F),  # ideographic description, CJK symbols and punctuation
    (0x3040, 0x31FF),  # Hiragana, Katakana, Bopomofo, Hangul compatibility Jamo, Kanbun, …
    (0x3200, 0x4DBF),  # enclosed CJK, CJK compatibility, extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul Jamo extended A
    (0xAC00, 0xD7FF),  # Hangul syllables, Jamo extended B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFF00, 0xFFEF),  # half-width and full-width forms
    (0x20000, 0x3FFFF),  # extensions B–H, compatibility supplement
)

_CJK = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES) + "]")
# Outside the BMP and not CJK (emoji, symbols, historic scripts).
_OTHER_ASTRAL = re.compile("[\U00010000-\U0001ffff\U00040000-\U0010ffff]")


def estimate_text(text: str) -> int:
    """Tokens of a text under the module's heuristic (0 for ``""``)."""
    if not text:
        return 0
    length = len(text)
    if text.isascii():
        return math.ceil(length / ASCII_CHARS_PER_TOKEN)
    ascii_chars = len(text.encode("ascii", "ignore"))
    cjk = len(_CJK.findall(text))
    other_astral = len(_OTHER_ASTRAL.findall(text))
    other_bmp = length - ascii_chars - cjk - other_astral
    return math.ceil(ascii_chars / ASCII_CHARS_PER_TOKEN + cjk + other_bmp / 2 + other_astral * ASTRAL_TOKENS)


def _json_text(value: object) -> str:
    if value_too_deep(value):
        # json.dumps and repr recurse: a runaway value (imported, or stored before arguments were
        # depth-checked) is counted by its leaves, brackets aside, without recursion.
        return " ".join(_leaves(value))
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):  # a cycle or NaN: the repr is as long, near enough
        return repr(value)


def _leaves(value: object) -> list[str]:
    """The keys and scalar values in ``value``, as text (iterative; each container once)."""
    out: list[str] = []
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, dict | list):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, dict):
                out.extend(str(key) for key in item)
                stack.extend(item.values())
            else:
                stack.extend(item)
        else:
            out.append(str(item))
    return out


def estimate_block(block: ContentBlock) -> int:
    """Tokens of one content block (seed 002 §6b).

    Text and thinking: their text; a redacted thinking block: its opaque data as text; a tool
    call: its name and JSON arguments (the raw argument text when the model's was not JSON) plus
    :data:`TOOL_USE_OVERHEAD`; a tool result: its content plus :data:`TOOL_RESULT_OVERHEAD`; an
    image: :data:`IMAGE_TOKENS`.
    """
    match block:
        case TextBlock(text=text) | ThinkingBlock(text=text):
            return estimate_text(text)
        case RedactedThinkingBlock(data=data):
            return estimate_text(data)
        case ToolUseBlock(name=name, arguments=arguments, raw_arguments=raw):
            arguments_text = raw if raw is not None else _json_text(arguments)
            return TOOL_USE_OVERHEAD + estimate_text(name) + estimate_text(arguments_text)
        case ToolResultBlock(content=content):
            return TOOL_RESULT_OVERHEAD + estimate_text(content)
        case ImageBlock():
            return IMAGE_TOKENS
    raise TypeError(f"not a content block: {block!r}")


def estimate_message(message: Message) -> int:
    """Tokens of one message: :data:`MESSAGE_OVERHEAD` plus its blocks (seed 002 §6a)."""
    return MESSAGE_OVERHEAD + sum(estimate_block(block) for block in message.content)


def estimate_messages(messages: Iterable[Message]) -> int:
    """Tokens of a list of messages (the sum of :func:`estimate_message`)."""
    return sum(estimate_message(message) for message in messages)


def estimate_tools(tools: Sequence[ToolDefinition]) -> int:
    """Tokens the tool definitions of a request take: name, description and JSON schema."""
    return sum(
        TOOL_DEFINITION_OVERHEAD
        + estimate_text(tool.name)
        + estimate_text(tool.description)
        + estimate_text(_json_text(tool.parameters))
        for tool in tools
    )


def estimate_request(messages: Iterable[Message], tools: Sequence[ToolDefinition] = ()) -> int:
    """Tokens of a whole request: messages, tool definitions and :data:`REQUEST_OVERHEAD`."""
    return REQUEST_OVERHEAD + estimate_messages(messages) + estimate_tools(tools)
