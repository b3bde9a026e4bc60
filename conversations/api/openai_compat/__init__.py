"""The OpenAI-compatible endpoint under ``/v1`` (issue 18): ``README.md`` of ``conversations/api``."""
