"""An MCP tool result as text (pure): text joined, other content summarised, errors reported."""

from __future__ import annotations

import base64

import mcp_types as types
import pytest

from conversations.tools.mcp.results import result_text


def test_text_blocks_are_joined_and_other_content_is_summarised():
    png = base64.b64encode(b"\x89PNG" + b"\0" * 96).decode()
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="first"),
            types.ImageContent(type="image", data=png, mime_type="image/png"),
            types.AudioContent(type="audio", data="", mime_type="audio/wav"),
            types.ResourceLink(type="resource_link", uri="file:///a.txt", name="a"),
            types.EmbeddedResource(
                type="resource", resource=types.TextResourceContents(uri="file:///b.txt", text="inside")
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(uri="file:///c.bin", blob=png, mime_type="application/x"),
            ),
            types.TextContent(type="text", text="last"),
        ]
    )

    text, is_error = result_text(result)

    assert is_error is False
    assert text.split("\n") == [
        "first",
        "[image: image/png, 100 bytes]",
        "[audio: audio/wav, 0 bytes]",
        "[resource link: file:///a.txt (a)]",
        "[resource: file:///b.txt]",
        "inside",
        "[resource: file:///c.bin, application/x, 100 bytes]",
        "last",
    ]


def test_an_error_result_is_reported_and_structured_content_fills_an_empty_result():
    assert result_text(
        types.CallToolResult(content=[types.TextContent(type="text", text="no")], is_error=True)
    ) == (
        "no",
        True,
    )
    assert result_text(types.CallToolResult(content=[], structured_content={"n": 1})) == ('{"n": 1}', False)


def test_something_that_is_not_a_tool_result_is_refused():
    with pytest.raises(ValueError, match="not a tool result"):
        result_text(object())
