"""``manage.py doctor``'s LLM provider check (the default model preset's): the configuration builds, and for a real provider
one cheap authenticated request (a streamed completion of at most 1 token, no retries, short
timeouts; DESIGN §8). Failures name the ``PICOBOT_LLM_*`` variable to fix; errors are redacted by
the provider.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import time
from typing import Any

from django.conf import settings

from conversations.management.commands._doctor_check import FAIL, OK, WARN, Check, safe_url
from providers.config import ProviderConfig


def _default_config() -> ProviderConfig:
    """The default model preset's configuration (the ``PICOBOT_LLM_*`` settings without a
    ``[models]`` table, or when the file does not load: the presets check reports that)."""
    from conversations.runtime.provider import read_catalog

    try:
        catalog = read_catalog()
    except ValueError:
        return settings.PICOBOT.provider_config()
    return catalog.presets[catalog.default].config


def _file_terms() -> dict[str, str] | None:
    """``PICOBOT_LLM_*`` name → what to fix instead when the default preset comes from a
    ``[models]`` table (``[models.NAME].base_url`` …); None without one. Raises ValueError when
    the file does not load."""
    from conversations.runtime.provider import read_catalog

    catalog = read_catalog()
    if not catalog.from_file:
        return None
    preset = catalog.presets[catalog.default]
    table = f"[models.{preset.name}]"
    key = f"${preset.api_key_env} ({table}.api_key_env)" if preset.api_key_env else f"{table}.api_key_env"
    return {
        "PICOBOT_LLM_BASE_URL": f"{table}.base_url in PICOBOT_CONFIG",
        "PICOBOT_LLM_MODEL": f"{table}.model",
        "PICOBOT_LLM_API_KEY": key,
        "PICOBOT_LLM_PROVIDER": f"{table}.provider",
    }


def check_provider(timeout: float, request: bool) -> list[Check]:
    """The default preset's provider builds and, with ``request``, answers a 1-token probe; each
    fix names what to change where it is set (a ``PICOBOT_LLM_*`` variable or the preset's key)."""
    try:
        terms = _file_terms()
    except ValueError:  # the presets check already failed with the file's error
        return [
            Check(
                WARN,
                "LLM provider",
                "not checked: PICOBOT_CONFIG does not load (see model presets)",
                "fix the file first",
            )
        ]
    checks = _check_provider(timeout, request)
    if terms is None:
        return checks
    return [
        dataclasses.replace(check, detail=_in_terms(check.detail, terms), fix=_in_terms(check.fix, terms))
        for check in checks
    ]


def _in_terms(text: str, terms: dict[str, str]) -> str:
    for variable, instead in terms.items():
        text = text.replace(variable, instead)
    return text.replace("the PICOBOT_LLM_* variable named above", "the preset's key named above")


def _provider_config(timeout: float) -> ProviderConfig:
    config = _default_config()
    return dataclasses.replace(
        config,
        max_retries=0,
        connect_timeout=min(config.connect_timeout, timeout),
        first_byte_timeout=timeout,
        idle_timeout=timeout,
        thinking_budget=0,  # a 1-token probe cannot carry a thinking budget
    )


def _cause(exc: BaseException) -> str:
    """The transport error under a provider error (e.g. ``[Errno 111] Connection refused``);
    text the error's own message already says is not repeated."""
    parts: list[str] = []
    said = str(exc)
    cause, seen = exc.__cause__, 0
    while cause is not None and seen < 6:
        text = str(cause).strip()
        if isinstance(cause, OSError) and not isinstance(cause, socket.gaierror) and (cause.errno or 0) > 0:
            text = f"{os.strerror(cause.errno)}: {cause.strerror or text}"
        if text and text not in parts and text not in said:
            parts.append(text)
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return f" ({'; '.join(parts)[:200]})" if parts else ""


async def _probe(provider: Any, timeout: float) -> None:
    from providers.messages import Message
    from providers.types import ProviderRequest

    try:
        async with asyncio.timeout(timeout + 5):
            await provider.collect(ProviderRequest(messages=[Message.user("ping")], max_tokens=1))
    finally:
        await provider.aclose()


def _check_provider(timeout: float, request: bool) -> list[Check]:
    from providers import errors
    from providers.factory import build_provider

    config = _provider_config(timeout)
    kind = config.provider or "replay"
    try:
        build_provider(_default_config())  # as serve builds it (no I/O)
        provider = build_provider(config)  # the probe's: no retries, short timeouts, no thinking
    except ValueError as exc:
        said = str(exc)
        if "PICOBOT_" not in said:  # e.g. urlsplit's "Invalid IPv6 URL": it is the base URL's
            said = f"PICOBOT_LLM_BASE_URL: {said}"
        return [
            Check(
                FAIL,
                "LLM provider",
                f"configuration: {said}",
                "set the PICOBOT_LLM_* variable named above (README, Configuration)",
            )
        ]
    if getattr(provider, "offline", False) or kind == "replay":
        return [
            Check(
                WARN,
                "LLM provider",
                "offline replay provider (no LLM configured): answers are recorded samples",
                "set PICOBOT_LLM_PROVIDER (openai | anthropic), PICOBOT_LLM_MODEL, PICOBOT_LLM_API_KEY "
                "and, for other servers, PICOBOT_LLM_BASE_URL",
            )
        ]
    url = getattr(provider, "display_url", "") or safe_url(config.base_url)
    what = f"{provider.name} at {url}, model {provider.model}"
    if not request:
        asyncio.run(provider.aclose())
        return [
            Check(OK, "LLM provider", f"{what}: configuration builds (no request made: --no-llm-request)")
        ]
    started = time.monotonic()
    try:
        asyncio.run(_probe(provider, timeout))
    except errors.ProviderConnectionError as exc:
        return [
            Check(
                FAIL,
                "LLM provider",
                f"{what}: cannot connect: {exc.message}{_cause(exc)}",
                "check PICOBOT_LLM_BASE_URL (scheme, host, port, the /v1 part) and that the server runs",
            )
        ]
    except (errors.ProviderTimeoutError, TimeoutError) as exc:
        return [
            Check(
                FAIL,
                "LLM provider",
                f"{what}: no answer within {timeout:g}s ({exc})",
                "check PICOBOT_LLM_BASE_URL and the network path to it (proxy, firewall)",
            )
        ]
    except errors.AuthenticationError as exc:
        return [
            Check(
                FAIL,
                "LLM provider",
                f"{what}: the key was refused (HTTP {exc.http_status}): {exc.message}",
                "set a valid PICOBOT_LLM_API_KEY for this server",
            )
        ]
    except errors.RateLimitedError as exc:
        return [
            Check(
                WARN,
                "LLM provider",
                f"{what}: reachable, but rate limited now (HTTP 429): {exc.message}",
                "check the account's quota and limits",
            )
        ]
    except errors.ServerError as exc:
        return [
            Check(
                WARN,
                "LLM provider",
                f"{what}: reachable, but it failed (HTTP {exc.http_status}): {exc.message}",
                "try again later; see the provider's status page",
            )
        ]
    except errors.ProviderError as exc:
        if exc.http_status == 404:
            return [
                Check(
                    FAIL,
                    "LLM provider",
                    f"{what}: not found (HTTP 404): {exc.message}",
                    "check PICOBOT_LLM_BASE_URL (OpenAI-compatible URLs end in /v1) and PICOBOT_LLM_MODEL",
                )
            ]
        if exc.http_status in (400, 422):
            return [
                Check(
                    WARN,
                    "LLM provider",
                    f"{what}: reachable, but the 1-token test request was refused (HTTP {exc.http_status}): "
                    f"{exc.message}",
                    "check PICOBOT_LLM_MODEL; some servers refuse tiny max_tokens, which is harmless",
                )
            ]
        return [
            Check(
                FAIL,
                "LLM provider",
                f"{what}: {exc.kind}: {exc.message}",
                "check PICOBOT_LLM_BASE_URL, PICOBOT_LLM_MODEL and PICOBOT_LLM_API_KEY",
            )
        ]
    except Exception as exc:  # a hook or a bug: still one line, not a traceback
        return [
            Check(
                FAIL,
                "LLM provider",
                f"{what}: {type(exc).__name__}: {str(exc)[:200]}",
                "check the PICOBOT_LLM_* settings and PICOBOT_LLM_HOOKS",
            )
        ]
    return [
        Check(OK, "LLM provider", f"{what}: answered a 1-token request in {time.monotonic() - started:.1f}s")
    ]
