"""Tool-call arguments checked against a tool's JSON Schema, in one bounded problem line (DESIGN §6).

Pure (no Django, no I/O), CPU-bound. :func:`validate_arguments` uses ``jsonschema``'s Draft 2020-12
validator and words the first problem as ``"at <JSON path>: <message>"``, at most
:data:`PROBLEM_CHARS` characters; :func:`quick_limits` finds a ``maxItems`` / ``maxLength`` /
``maxProperties`` breach first, so a value far over its limit is refused without ``jsonschema``
walking each of its items. The registry (``tool_registry``) and the plan import
(``conversations.transfer``) use them.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

PROBLEM_CHARS = 300
"""Bound of a validation message (it may quote the model's argument value)."""


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def validate_arguments(schema: dict | Draft202012Validator, arguments: Any) -> str | None:
    """Check ``arguments`` against a Draft 2020-12 schema (or a compiled validator).

    Returns None when valid, else one message naming the failing location as a JSON path
    (``"at $.steps[0].status: 'x' is not one of ['pending', 'in_progress', 'done']"``), at most
    ``PROBLEM_CHARS`` characters. Arguments must always be a JSON object. Length limits are
    checked first (:func:`quick_limits`), so an array far over its ``maxItems`` is refused
    without ``jsonschema`` looking at each of its items. CPU-bound (no I/O).
    """
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    validator = schema if isinstance(schema, Draft202012Validator) else Draft202012Validator(schema)
    problem = quick_limits(validator.schema, arguments)
    if problem is not None:
        return problem
    error = best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    return _problem(error.json_path, error.message, error.validator, error.validator_value)


def _problem(path: str, message: str, keyword: Any, rule: Any) -> str:
    """One bounded problem line; a message that quotes a long value names the rule instead."""
    if len(message) > PROBLEM_CHARS:
        return _rule_line(path, keyword, rule)
    return _bounded(f"at {path}: {message}", PROBLEM_CHARS)


def _rule_line(path: str, keyword: Any, rule: Any) -> str:
    shown = _bounded(json.dumps(rule, ensure_ascii=False, default=str), 100)
    return _bounded(f"at {path}: the value breaks the schema rule {keyword!r}: {shown}", PROBLEM_CHARS)


_TOO_LONG = {
    "maxLength": "is too long",
    "maxItems": "is too long",
    "maxProperties": "has too many properties",
}


def _over_limit(path: str, keyword: str, limit: int, value: Any) -> str:
    """The problem line ``jsonschema`` would give for ``value`` over ``keyword``'s ``limit``,
    without building the repr of a value that is certainly too long to quote (the repr of more
    than ``PROBLEM_CHARS // 3`` items or characters is longer than ``PROBLEM_CHARS``)."""
    if len(value) > PROBLEM_CHARS // 3:
        return _rule_line(path, keyword, limit)
    message = f"{value!r} {'is expected to be empty' if limit == 0 else _TOO_LONG[keyword]}"
    return _problem(path, message, keyword, limit)


def _limit(schema: dict, keyword: str) -> int | None:
    value = schema.get(keyword)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def quick_limits(schema: Any, value: Any, path: str = "$") -> str | None:
    """The problem line (as :func:`validate_arguments` words it) of the first
    ``maxItems``/``maxLength``/``maxProperties`` that ``value`` breaks, or None.

    Follows only the subschemas that apply unconditionally — ``properties``, an object
    ``additionalProperties`` (without ``patternProperties``) and an object ``items`` (after any
    ``prefixItems``) — so every problem it names is one
    ``jsonschema`` reports too (it is a fast path, not a validator: None does not mean valid).
    A container over its limit is refused before its members are looked at; lengths count
    characters (code points), as JSON Schema does. Iterative: no recursion on deep values.

    Returns:
        ``"at $.tags: the value breaks the schema rule 'maxItems': 8"`` and the like.
    """
    stack: list[tuple[Any, Any, str]] = [(schema, value, path)]
    while stack:
        schema, value, path = stack.pop()
        if not isinstance(schema, dict):
            continue
        if isinstance(value, str):
            limit = _limit(schema, "maxLength")
            if limit is not None and len(value) > limit:
                return _over_limit(path, "maxLength", limit, value)
        elif isinstance(value, list):
            limit = _limit(schema, "maxItems")
            if limit is not None and len(value) > limit:
                return _over_limit(path, "maxItems", limit, value)
            items = schema.get("items")
            prefix = schema.get("prefixItems")
            start = len(prefix) if isinstance(prefix, list) else 0  # ``items`` covers the rest only
            if isinstance(items, dict):
                stack.extend(
                    (items, value[index], f"{path}[{index}]")
                    for index in range(len(value) - 1, start - 1, -1)
                )
        elif isinstance(value, dict):
            limit = _limit(schema, "maxProperties")
            if limit is not None and len(value) > limit:
                return _over_limit(path, "maxProperties", limit, value)
            properties = schema.get("properties")
            properties = properties if isinstance(properties, dict) else {}
            # ``additionalProperties`` skips keys that a ``patternProperties`` pattern matches.
            others = None if "patternProperties" in schema else schema.get("additionalProperties")
            for key, item in value.items():
                sub = properties.get(key, others if isinstance(others, dict) else None)
                if sub is not None:
                    stack.append((sub, item, f"{path}.{key}"))
    return None
