"""MCP server configurations: the ``[mcp_servers.NAME]`` tables of ``PICOBOT_CONFIG`` (pure).

A server is either **stdio** (``command`` + ``args``, ``env``, ``env_from``: PicoBot starts it
as a child process) or **streamable HTTP** (``url``, ``headers_env``); ``tools`` is an optional
allow list of the server's tool names, ``timeout`` (seconds) an optional bound per call below
``PICOBOT_TOOL_TIMEOUT``. Secrets are never written here: ``env_from`` and ``headers_env`` map a
variable or header to the *name* of PicoBot's environment variable whose value is sent.

:func:`load_mcp_servers` validates a parsed document; :func:`parse_server` one table (the admin's
database rows go through it too). Errors are ``ValueError`` naming the table and key, like the
preset parser (``providers.presets``). No Django, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,23}$")
"""A server name: the prefix of its tools' names (``NAME__tool``). Letters, digits, ``-`` and
single ``_`` (a double one separates the prefix), starting with a letter, at most 24 characters:
the whole tool name must fit the providers' ``^[A-Za-z0-9_-]{1,64}$``."""
NAME_MAX_CHARS = 24
SEPARATOR = "__"
TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What OpenAI and Anthropic accept as a function name: a server's tool whose prefixed name does
not match is left out (and the status says so)."""
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME_PATTERN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
BASE_ENV = ("PATH", "HOME", "LANG")
"""What a stdio server inherits of PicoBot's environment; nothing else (no PICOBOT_*, no keys)."""

SERVER_KEYS = frozenset({"command", "args", "env", "env_from", "url", "headers_env", "tools", "timeout"})
"""The keys an ``[mcp_servers.NAME]`` table may hold (any other is refused as a likely typo)."""


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server as configured.

    Attributes:
        name: the tool-name prefix (``NAME__tool``).
        command, args: the stdio server's program and arguments ("" for an HTTP server).
        env: literal variables added to the stdio server's minimal environment.
        env_from: stdio variable → the name of PicoBot's environment variable holding its value.
        url: the streamable HTTP endpoint ("" for a stdio server).
        headers_env: HTTP header → the name of PicoBot's environment variable holding its value.
        tools: the allow list of the server's own tool names (None: all of them).
        timeout: seconds per call (None: ``PICOBOT_TOOL_TIMEOUT``; a longer one does not apply).
        source: where it was configured (``PICOBOT_CONFIG`` or ``admin``), for status and errors.
    """

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    env_from: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers_env: tuple[tuple[str, str], ...] = ()
    tools: tuple[str, ...] | None = None
    timeout: float | None = None
    source: str = "PICOBOT_CONFIG"

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "stdio" if self.command else "http"

    def tool_name(self, tool: str) -> str:
        """The registry name of the server's tool ``tool``: ``NAME__tool``."""
        return f"{self.name}{SEPARATOR}{tool}"

    def allows(self, tool: str) -> bool:
        """Whether the allow list lets ``tool`` (the server's own name) through."""
        return self.tools is None or tool in self.tools

    def public(self) -> dict[str, Any]:
        """What the admin and ``doctor`` show: names of secret variables, never their values."""
        return {
            "name": self.name,
            "transport": self.transport,
            "target": " ".join([self.command, *self.args]) if self.command else self.url,
            "env": sorted(name for name, _ in self.env),
            "env_from": dict(self.env_from),
            "headers_env": dict(self.headers_env),
            "tools": list(self.tools) if self.tools is not None else None,
            "timeout": self.timeout,
            "source": self.source,
        }


def load_mcp_servers(document: Mapping[str, Any], *, source: str = "PICOBOT_CONFIG") -> list[McpServerConfig]:
    """The servers of a parsed ``PICOBOT_CONFIG`` document's ``[mcp_servers]`` table, in order.

    Returns ``[]`` when the document has no such table.

    Raises:
        ValueError: ``"{source}: [mcp_servers.NAME].key: …"`` for a bad name, unknown key,
            wrong type, or a table that is neither (or both) stdio and HTTP.
    """
    servers = document.get("mcp_servers")
    if servers is None:
        return []
    if not isinstance(servers, Mapping):
        raise ValueError(f"{source}: [mcp_servers] must be a table of [mcp_servers.NAME] tables")
    return [parse_server(name, table, source=source) for name, table in servers.items()]


def parse_server(name: Any, table: Any, *, source: str = "PICOBOT_CONFIG") -> McpServerConfig:
    """One ``[mcp_servers.NAME]`` table as a :class:`McpServerConfig`.

    Raises:
        ValueError: as :func:`load_mcp_servers`.
    """
    where = f"{source}: [mcp_servers.{name}]"
    if not isinstance(name, str) or not NAME_PATTERN.match(name) or SEPARATOR in name or name.endswith("_"):
        raise ValueError(
            f"{where}: a name is 1–{NAME_MAX_CHARS} letters, digits, '-' or single '_', starting with "
            "a letter (it prefixes the tool names: NAME__tool)"
        )
    if not isinstance(table, Mapping):
        raise ValueError(f"{where} must be a table")
    unknown = sorted(set(table) - SERVER_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(SERVER_KEYS))})")
    command = _text(table, "command", where)
    url = _text(table, "url", where)
    if bool(command) == bool(url):
        raise ValueError(f"{where}: set either command (a stdio server) or url (a streamable HTTP server)")
    stdio_keys, http_keys = ("args", "env", "env_from"), ("headers_env",)
    misplaced = [k for k in (http_keys if command else stdio_keys) if k in table]
    if misplaced:
        kind = "a stdio server (command)" if command else "an HTTP server (url)"
        raise ValueError(f"{where}.{misplaced[0]} does not apply to {kind}")
    if url and not re.match(r"^https?://[^\s/]+", url):
        raise ValueError(f"{where}.url must be an http(s) URL, got {url!r}")
    args = table.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{where}.args must be a list of strings")
    tools = table.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools)
    ):
        raise ValueError(f"{where}.tools must be a list of the server's tool names")
    if tools == []:
        raise ValueError(f"{where}.tools is empty: list the tools to offer, or leave it out for all of them")
    timeout = table.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"{where}.timeout must be a number of seconds > 0, got {timeout!r}")
    for text in (command, *args):
        if "\0" in text:
            raise ValueError(f"{where}: command and args cannot hold NUL characters")
    return McpServerConfig(
        name=name,
        command=command,
        args=tuple(args),
        env=_pairs(table, "env", where, key_pattern=ENV_NAME_PATTERN, value_is_name=False),
        env_from=_pairs(table, "env_from", where, key_pattern=ENV_NAME_PATTERN, value_is_name=True),
        url=url,
        headers_env=_pairs(table, "headers_env", where, key_pattern=HEADER_NAME_PATTERN, value_is_name=True),
        tools=tuple(dict.fromkeys(tools)) if tools is not None else None,
        timeout=float(timeout) if timeout is not None else None,
        source=source,
    )


def stdio_environment(
    server: McpServerConfig, environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The environment a stdio server starts with, and the ``env_from`` variables that are unset.

    ``PATH``, ``HOME`` and ``LANG`` from ``environ``, then ``env``, then ``env_from`` resolved in
    ``environ``: nothing else of PicoBot's environment (its ``PICOBOT_*`` settings, provider keys)
    reaches the child. (The ``mcp`` SDK adds its own short list on top — ``HOME``, ``LOGNAME``,
    ``PATH``, ``SHELL``, ``TERM``, ``USER`` — none of them a secret.)
    """
    env = {key: environ[key] for key in BASE_ENV if key in environ}
    env.update(dict(server.env))
    missing = []
    for key, variable in server.env_from:
        if variable in environ:
            env[key] = environ[variable]
        else:
            missing.append(variable)
    return env, missing


def http_headers(server: McpServerConfig, environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The headers an HTTP server gets (from ``headers_env``), and the variables that are unset.

    A value with control characters counts as unset (it cannot be a header value).
    """
    headers, missing = {}, []
    for header, variable in server.headers_env:
        value = environ.get(variable, "")
        if value and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            headers[header] = value
        else:
            missing.append(variable)
    return headers, missing


def _text(table: Mapping[str, Any], key: str, where: str) -> str:
    value = table.get(key, "")
    if not isinstance(value, str):
        raise ValueError(f"{where}.{key} must be a string, got {value!r}")
    return value.strip()


def _pairs(
    table: Mapping[str, Any], key: str, where: str, *, key_pattern: re.Pattern, value_is_name: bool
) -> tuple[tuple[str, str], ...]:
    value = table.get(key, {})
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}.{key} must be a table")
    pairs = []
    for name, item in value.items():
        if not isinstance(name, str) or not key_pattern.match(name):
            raise ValueError(f"{where}.{key}: {name!r} is not a valid name")
        if not isinstance(item, str) or "\0" in item:
            raise ValueError(f"{where}.{key}.{name} must be a string")
        if value_is_name and not ENV_NAME_PATTERN.match(item):
            raise ValueError(f"{where}.{key}.{name} must name an environment variable, got {item!r}")
        pairs.append((name, item))
    return tuple(pairs)
