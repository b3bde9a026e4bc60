"""The ``[mcp_servers.NAME]`` tables (pure): what is accepted, what is refused and how it is named."""

from __future__ import annotations

import tomllib

import pytest

from conversations.tools.mcp.config import http_headers, load_mcp_servers, parse_server, stdio_environment
from providers.config import ProviderConfig
from providers.presets import load_catalog

GOOD = """
[mcp_servers.files]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]
env = { LOG_LEVEL = "info" }
env_from = { GITHUB_TOKEN = "PICOBOT_MCP_GITHUB" }
tools = ["read_file", "list_directory"]
timeout = 10

[mcp_servers.search]
url = "https://mcp.example.com/mcp"
headers_env = { Authorization = "SEARCH_MCP_AUTH" }
"""


def load(text: str):
    return load_mcp_servers(tomllib.loads(text))


def test_a_good_file_gives_stdio_and_http_servers_in_order():
    files, search = load(GOOD)

    assert (files.transport, files.command, files.args) == (
        "stdio",
        "npx",
        ("-y", "@modelcontextprotocol/server-filesystem", "/srv"),
    )
    assert files.env == (("LOG_LEVEL", "info"),) and files.env_from == (
        ("GITHUB_TOKEN", "PICOBOT_MCP_GITHUB"),
    )
    assert files.tools == ("read_file", "list_directory") and files.timeout == 10.0
    assert files.allows("read_file") and not files.allows("write_file")
    assert files.tool_name("read_file") == "files__read_file"
    assert (search.transport, search.url, search.tools) == ("http", "https://mcp.example.com/mcp", None)
    assert search.allows("anything")


def test_the_preset_parser_accepts_the_mcp_servers_table_beside_the_models():
    base = ProviderConfig()
    catalog = load_catalog(tomllib.loads(GOOD), base=base, context_window=1000, environ={})
    assert catalog.names() == ["default"]
    assert load("") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[mcp_servers.a]\n", r"\[mcp_servers.a\]: set either command \(a stdio server\) or url"),
        ('[mcp_servers.a]\ncommand = "x"\nurl = "http://h/mcp"\n', r"set either command .* or url"),
        (
            '[mcp_servers.a]\ncommand = "x"\ncomand = "y"\n',
            r"\[mcp_servers.a\]: unknown key 'comand' \(known: args, ",
        ),
        ('[mcp_servers."a b"]\ncommand = "x"\n', r"\[mcp_servers.a b\]: a name is 1–24 letters"),
        ('[mcp_servers.a__b]\ncommand = "x"\n', r"a name is"),
        ('[mcp_servers.a_]\ncommand = "x"\n', r"a name is"),
        ('[mcp_servers.abcdefghijklmnopqrstuvwxyz]\ncommand = "x"\n', r"a name is"),
        (
            '[mcp_servers.a]\ncommand = "x"\nargs = "-v"\n',
            r"\[mcp_servers.a\].args must be a list of strings",
        ),
        ('[mcp_servers.a]\ncommand = "x"\nenv = { A = 1 }\n', r"\[mcp_servers.a\].env.A must be a string"),
        (
            '[mcp_servers.a]\ncommand = "x"\nenv_from = { A = "not a name" }\n',
            r"env_from.A must name an environment",
        ),
        ('[mcp_servers.a]\nurl = "ftp://h"\n', r"\[mcp_servers.a\].url must be an http\(s\) URL"),
        (
            '[mcp_servers.a]\nurl = "http://h"\nargs = []\n',
            r"\[mcp_servers.a\].args does not apply to an HTTP server",
        ),
        (
            '[mcp_servers.a]\ncommand = "x"\nheaders_env = {}\n',
            r"headers_env does not apply to a stdio server",
        ),
        (
            '[mcp_servers.a]\nurl = "http://h"\nheaders_env = { "Bad Header" = "X" }\n',
            r"headers_env: 'Bad Header'",
        ),
        ('[mcp_servers.a]\ncommand = "x"\ntools = "echo"\n', r"\[mcp_servers.a\].tools must be a list"),
        ('[mcp_servers.a]\ncommand = "x"\ntools = []\n', r"\[mcp_servers.a\].tools is empty: list the tools"),
        (
            '[mcp_servers.a]\ncommand = "x"\ntimeout = 0\n',
            r"\[mcp_servers.a\].timeout must be a number of seconds > 0",
        ),
        ('[mcp_servers.a]\ncommand = "x"\ntimeout = true\n', r"timeout must be a number"),
        ('[mcp_servers.a]\ncommand = "x"\ntimeout = nan\n', r"timeout must be a number"),
        ("mcp_servers = 3\n", r"PICOBOT_CONFIG: \[mcp_servers\] must be a table"),
        ("[mcp_servers]\na = 1\n", r"\[mcp_servers.a\] must be a table"),
    ],
)
def test_a_bad_table_is_refused_naming_the_table_and_key(text, message):
    with pytest.raises(ValueError, match=message) as caught:
        load(text)
    assert str(caught.value).startswith("PICOBOT_CONFIG: ")


def test_a_stdio_environment_is_path_home_lang_plus_its_own_and_never_the_rest():
    server = parse_server("s", {"command": "x", "env": {"A": "1"}, "env_from": {"T": "SRC", "U": "UNSET"}})
    environ = {
        "PATH": "/bin",
        "HOME": "/h",
        "LANG": "C",
        "PICOBOT_SECRET_KEY": "k",
        "OPENAI_API_KEY": "sk",
        "SRC": "v",
    }

    env, missing = stdio_environment(server, environ)

    assert env == {"PATH": "/bin", "HOME": "/h", "LANG": "C", "A": "1", "T": "v"} and missing == ["UNSET"]


def test_http_headers_come_from_named_variables_and_unsafe_or_unset_ones_are_reported():
    server = parse_server(
        "h", {"url": "http://x/mcp", "headers_env": {"Authorization": "AUTH", "X-A": "NOPE", "X-B": "CRLF"}}
    )

    headers, missing = http_headers(server, {"AUTH": "Bearer t", "CRLF": "a\r\nInjected: 1"})

    assert headers == {"Authorization": "Bearer t"} and missing == ["NOPE", "CRLF"]


def test_public_shows_variable_names_never_values():
    server = parse_server("s", {"command": "x", "env": {"A": "secret-ish"}, "env_from": {"T": "SRC"}})
    shown = server.public()
    assert shown["env"] == ["A"] and shown["env_from"] == {"T": "SRC"} and "secret-ish" not in str(shown)
