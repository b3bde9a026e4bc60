"""Standard JSON only, and only values the database stores as they are (pure: no Django).

:func:`read_document` reads an export's text in bounded pieces; :func:`load_json` /
:func:`loads_strict` parse it refusing what ``json`` would otherwise bend (``NaN``/``Infinity``
literals, numbers beyond a float, integers with more digits than Python converts, a key twice
in one object); :func:`check_storable_json` refuses, naming the place, a NUL character, a lone
surrogate or a non-finite number anywhere, and nesting beyond ``providers.json_depth``'s
``MAX_JSON_DEPTH``. Every refusal is a :class:`~conversations.transfer.errors.TransferError`.
The import and the admin's JSON fields (``conversations.admin.fields``) share these rules.
"""

from __future__ import annotations

import io
import json
import math
from typing import IO, Any

from conversations.transfer.errors import TransferError, json_path, shown
from providers.json_depth import MAX_JSON_DEPTH, value_too_deep

MAX_DOCUMENT_CHARS = 2 * 1024**3
"""Characters of an export file read at most (2 Gi: a very large chat with images fits)."""
READ_CHARS = 16 * 1024**2


def read_document(stream: Any) -> str:
    """The text of an export from ``stream`` (a text stream), read in bounded pieces.

    Raises TransferError (to follow the file's name) when the text does not start like a JSON
    object (``/dev/zero``, a binary file: refused at once, not read to the end) or is longer than
    :data:`MAX_DOCUMENT_CHARS`; a ``UnicodeDecodeError`` of the stream passes through.
    """
    head = stream.read(READ_CHARS).removeprefix("\ufeff")  # a UTF-8 byte-order mark is no content
    if not head.lstrip().startswith("{"):
        raise TransferError("is not JSON: an export is a JSON object, starting with '{'")
    parts, total = [head], len(head)
    while chunk := stream.read(READ_CHARS):
        total += len(chunk)
        if total > MAX_DOCUMENT_CHARS:
            raise TransferError(
                f"is larger than {MAX_DOCUMENT_CHARS} characters: not an export this command reads"
            )
        parts.append(chunk)
    return "".join(parts)


class _NotStandardJSONError(ValueError):
    """Raised from inside ``json.load`` hooks; :func:`load_json` turns it into TransferError."""


def _refuse_constant(name: str) -> Any:
    raise _NotStandardJSONError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStandardJSONError(f"the number {text[:40]} is too large for a float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise _NotStandardJSONError(f"the key {shown(twice)} appears twice in one object")
    return obj


def load_json(stream: IO[str]) -> Any:
    """The JSON document read from ``stream``, strictly (what ``json.load`` would otherwise bend).

    Raises TransferError, its message to follow the file's name: ``is not JSON: …`` (a syntax or
    encoding error), ``is not standard JSON: …`` (``NaN``, ``Infinity``, ``-Infinity``, a number
    beyond a float or with more digits than Python converts, a key twice in one object: ``json``
    would read the first three as floats no database column takes and keep only the last of the
    duplicates) or ``nests JSON too deeply``.
    """
    text = stream.read()
    try:
        return json.loads(
            text, parse_constant=_refuse_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
        )
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TransferError(f"is not JSON: {exc}") from None
    except ValueError as exc:  # ours, or int()'s digit limit (its text suggests a Python setting)
        said = str(exc)
        if "int_max_str_digits" in said or "Exceeds the limit" in said:
            said = "an integer has more digits than any column holds"
        where = _first_offence(text)
        raise TransferError(f"is not standard JSON: {said}" + (f" (at {where})" if where else "")) from None
    except RecursionError:
        raise TransferError("nests JSON too deeply") from None


class _Pairs(list):
    """An object's (key, value) pairs as parsed, duplicates kept."""


class _Offence:
    """A number standard JSON or a column cannot hold, kept in place to be found."""


def _first_offence(text: str) -> str | None:
    """The JSON path of the first value :func:`load_json` refuses (a duplicated key, NaN/Infinity,
    a number beyond a float, an over-long integer), in document order; None when not found.
    Only run once parsing failed, so a good document is parsed once."""

    def number(kind: type) -> Any:
        def parse(raw: str) -> Any:
            try:
                value = kind(raw)
            except ValueError:
                return _Offence()
            return value if not isinstance(value, float) or math.isfinite(value) else _Offence()

        return parse

    try:
        tree = json.loads(
            text,
            object_pairs_hook=_Pairs,
            parse_constant=lambda _: _Offence(),
            parse_float=number(float),
            parse_int=number(int),
        )
    except (ValueError, RecursionError):
        return None
    # Depth first in document order; an object's duplicate keys are checked after its values, as
    # json reports them (its object hook runs once the values are parsed).
    stack: list[tuple[Any, tuple[str | int, ...], bool]] = [(tree, (), False)]
    while stack:
        item, loc, values_done = stack.pop()
        if isinstance(item, _Offence):
            return json_path(loc)
        if isinstance(item, _Pairs):
            if values_done:
                keys = [key for key, _ in item]
                twice = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
                if twice is not None:
                    return json_path((*loc, twice))
                continue
            stack.append((item, loc, True))
            stack.extend((value, (*loc, key), False) for key, value in reversed(item))
        elif isinstance(item, list):
            stack.extend((value, (*loc, i), False) for i, value in reversed(list(enumerate(item))))
    return None


def loads_strict(text: str) -> Any:
    """:func:`load_json` for a string (the admin's JSON fields take the import's rules).

    Raises TransferError (``is not JSON: …`` / ``is not standard JSON: …`` / too deep).
    """
    return load_json(io.StringIO(text))


def _value_problem(value: Any) -> str | None:
    """Why a JSON scalar cannot be stored exactly, or None when it can."""
    if isinstance(value, str):
        if "\x00" in value:
            return "holds a NUL character (\\u0000), which the database cannot store"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"is not valid Unicode (a lone surrogate): {shown(value)}"
    elif isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    return None


def check_storable_json(value: Any, *, max_depth: int | None = MAX_JSON_DEPTH) -> None:
    """Refuse what the database would not store as it is: a string (keys too) holding a NUL or a
    lone surrogate, a non-finite number, or (unless ``max_depth`` is None) more than ``max_depth``
    nested arrays/objects (``{}`` is 1 deep).

    Raises TransferError naming the place (``dialogs[0].messages[3].content: holds a NUL
    character …``; ``the document nests deeper than 64 levels``). Iterative, so a hostile value
    cannot overflow the stack here. The import passes ``max_depth=None``: its schema bounds each
    free-form value (``schema.py``), the document's own levels do not count.
    """
    if max_depth is not None and value_too_deep(value, max_depth):
        raise TransferError(f"{json_path(())} nests deeper than {max_depth} levels")
    # (value, where): ``where`` is a (parent's where, key) chain, so a step costs O(1) however deep.
    stack: list[tuple[Any, tuple | None]] = [(value, None)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                problem = _value_problem(key)
                if problem is not None:
                    raise TransferError(f"{json_path(_loc(where))}: a key {problem}")
                stack.append((child, (where, key)))
        elif isinstance(item, list):
            stack.extend((child, (where, k)) for k, child in enumerate(item))
        else:
            problem = _value_problem(item)
            if problem is not None:
                raise TransferError(f"{json_path(_loc(where))}: {problem}")


def _loc(where: tuple | None) -> tuple[str | int, ...]:
    """The keys of a ``(parent, key)`` chain, outermost first (``None`` is the root)."""
    keys: list[str | int] = []
    while where is not None:
        where, key = where
        keys.append(key)
    return tuple(reversed(keys))
