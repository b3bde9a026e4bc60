"""A user message of images alone maps to image parts only: neither vendor gets an empty text
part (OpenAI-compatible servers and Anthropic refuse one)."""

from __future__ import annotations

from providers.anthropic import AnthropicProvider
from providers.blocks import ImageBlock
from providers.messages import Message
from providers.openai_compat import OpenAICompatProvider
from providers.types import ProviderRequest

IMAGE = ImageBlock("image/png", "aGk=")
REQUEST = ProviderRequest([Message.system("s"), Message.user("", images=[IMAGE])], [])


def test_openai_sends_an_image_only_message_as_one_image_part() -> None:
    body = OpenAICompatProvider("http://x/v1", "k", "m").build_body(REQUEST)
    assert body["messages"][-1] == {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}],
    }


def test_anthropic_sends_an_image_only_message_as_one_image_block() -> None:
    body = AnthropicProvider("http://x", "k", "m").build_body(REQUEST)
    assert body["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}}
        ],
    }
