"""How deeply JSON nests, found without recursion (pure; no Django).

Model-provided JSON (tool call arguments) may nest thousands of levels deep (a runaway or hostile
response: ``[[[[…]]]]``). ``json.loads``/``json.dumps``, ``copy.deepcopy`` and every recursive
walk then raise ``RecursionError`` (or nearly exhaust the stack for the next one), so such a value
is refused before it is parsed: :func:`text_too_deep` scans the text, :func:`value_too_deep`
walks an already parsed value, both iteratively.

``conversations.transfer`` applies this bound to imported free-form values and the admin's JSON fields.
"""

from __future__ import annotations

import re
from typing import Any

MAX_JSON_DEPTH = 64
"""Nesting levels model-provided JSON may have (an object inside an object counts 2); deeper
tool call arguments are invalid arguments. Real tool arguments nest a handful of levels."""

# A JSON string (skipped whole, so brackets inside it do not count; an unterminated one runs to
# the end) or one bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


def text_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` nests more than ``limit`` arrays/objects deep.

    Not a validator: brackets are counted outside strings, whatever else the text holds, so a
    text that is not JSON gives some answer and then fails to parse. O(len(text)); texts with at
    most ``limit`` opening brackets are answered after two ``str.count`` calls.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _TOKEN.finditer(text):
        char = text[match.start()]
        if char == "[" or char == "{":
            depth += 1
            if depth > limit:
                return True
        elif char == "]" or char == "}":
            depth -= 1
    return False


def value_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` (dicts and lists, as ``json.loads`` makes them) nests more than ``limit``
    containers deep; ``{}`` is 1 deep, a string 0. Iterative; a value that holds itself is
    reported as too deep."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            return True
        stack.extend((child, depth) for child in children if isinstance(child, (dict, list)))
    return False
