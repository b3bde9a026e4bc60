"""The transfer's one error, and how a refusal names its place (pure: pydantic, no Django).

:class:`TransferError` is what every part of the package raises; its message says what is wrong
and where, as a JSON path: ``dialogs[0].messages[3].seq must be 4 (seq is contiguous from 1),
got 5``. :func:`describe` words the first problem of a schema ``ValidationError`` that way:

- an unknown field: ``<object> has unknown field(s) 'a', 'b' (this PicoBot reads version 1)``;
- a missing field: ``<path> is required (<its description>)``;
- a refusal of ours (:func:`refusal`): ``<path><joiner><our message>``;
- any other (type, range, length): ``<path> must be <the field's description>, got <value>``.

A field's description (``Field(description=…)`` in ``schema.py``) is therefore written to follow
"must be": ``an integer from 0 to 32767``, ``a string or null``.
"""

from __future__ import annotations

import json
import types
from collections.abc import Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

_REFUSAL = "picobot_refusal"
SHOWN_CHARS = 60
"""Bound of a value quoted in a message (``got …``)."""


class TransferError(Exception):
    """Bad input for an export or an import; the message says what and where."""


def shown(value: Any) -> str:
    """``value`` as JSON for a message, at most :data:`SHOWN_CHARS` characters (a lone surrogate as
    its escape; a value ``json`` cannot write, or nests too deeply to, as its type)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: shown as its escape, never raw (unencodable)
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "…"


def json_path(loc: Sequence[str | int]) -> str:
    """``dialogs[0].messages[3].content`` for ``("dialogs", 0, "messages", 3, "content")``; a key
    that is no identifier as ``["odd key"]``; the empty path is ``the document``."""
    text = ""
    for key in loc:
        if isinstance(key, int):
            text += f"[{key}]"
        elif key.isidentifier():
            text += f".{key}" if text else key
        else:
            text += f"[{shown(key)}]"
    return text or "the document"


def unknown_fields(keys: Sequence[str], version: int) -> str:
    """``has unknown field(s) 'a', 'b', 'c' …`` (at most three named, each cut to 40 characters)."""
    keys = sorted(keys)
    listed = ", ".join(repr(k[:40]) for k in keys[:3]) + (" …" if len(keys) > 3 else "")
    return f"has unknown field(s) {listed} (this PicoBot reads version {version})"


def refusal(message: str, *, at: tuple[str | int, ...] = (), joiner: str = " ") -> PydanticCustomError:
    """An error for a schema validator to raise: :func:`describe` words it as the validated
    value's path, then ``at`` (a path below it), ``joiner`` and ``message`` — ``" "`` for a
    predicate (``must be 3``), ``": "`` for a sentence, ``""`` for a message that goes on the path
    (``[0].data is not valid base64``)."""
    return PydanticCustomError(_REFUSAL, "{message}", {"message": message, "at": at, "joiner": joiner})


def describe(exc: ValidationError, root: type[BaseModel], version: int) -> str:
    """The first problem of ``exc`` (raised by ``root.model_validate``) as one line naming its
    JSON path. Unknown fields of an object are named before the other problems inside it: a
    misspelt field explains the missing one."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    for error in errors:
        if error["type"] == "extra_forbidden" and first["loc"][: len(error["loc"]) - 1] == error["loc"][:-1]:
            parent = error["loc"][:-1]
            keys = [
                str(e["loc"][-1])
                for e in errors
                if e["type"] == "extra_forbidden" and e["loc"][:-1] == parent
            ]
            return f"{json_path(parent)} {unknown_fields(keys, version)}"
    loc = tuple(first["loc"])
    if first["type"] == _REFUSAL:
        ctx = first["ctx"]
        return f"{json_path(loc + tuple(ctx['at']))}{ctx['joiner']}{ctx['message']}"
    what = _description(root, loc)
    if first["type"] == "missing":
        return f"{json_path(loc)} is required" + (f" ({what})" if what else "")
    if what is None:
        return f"{json_path(loc)}: {first['msg']}"
    return f"{json_path(loc)} must be {what}, got {shown(first['input'])}"


def _unwrapped(kind: Any) -> Any:
    """``kind`` without ``Annotated`` metadata and without ``| None``."""
    while True:
        origin = get_origin(kind)
        if origin is Annotated:
            kind = get_args(kind)[0]
        elif origin in (Union, types.UnionType):
            rest = [arg for arg in get_args(kind) if arg is not type(None)]
            if len(rest) != 1:
                return kind
            kind = rest[0]
        else:
            return kind


def _description(root: type[BaseModel], loc: tuple[str | int, ...]) -> str | None:
    """The description of the field at ``loc`` below ``root``; ``an object`` for a list item that
    is a model; None when neither."""
    kind: Any = root
    field = None
    for key in loc:
        kind = _unwrapped(kind)
        if isinstance(key, int):
            if get_origin(kind) is not list:
                return None
            kind, field = get_args(kind)[0], None
        elif isinstance(kind, type) and issubclass(kind, BaseModel) and key in kind.model_fields:
            field = kind.model_fields[key]
            kind = field.annotation
        else:
            return None
    if field is not None:
        return field.description
    kind = _unwrapped(kind)
    return "an object" if isinstance(kind, type) and issubclass(kind, BaseModel) else None
