"""Pre-request, post-request and on-error hooks around every provider call (seed 002 §3a).

::

    hooks = provider.hooks

    @hooks.pre_request
    async def no_secrets(ctx: HookContext) -> Block | None:
        if "BEGIN PRIVATE KEY" in ctx.request.messages[-1].text:
            return Block("the message contains a private key")
        return None

    @hooks.post_request
    async def meter(ctx: HookContext, response: AssistantResponse) -> None: ...

    @hooks.on_error
    async def alert(ctx: HookContext, error: ProviderError) -> None: ...

Hooks run once per ``stream()`` call, not per HTTP retry: ``pre_request`` first (a
:class:`Block`, an exception or a timeout refuses the call with
:class:`~providers.errors.RequestBlockedError`: fail closed), then exactly one of
``post_request`` (saw ``Done``) or ``on_error``; those two only observe (failures are logged and
swallowed). Every hook has a timeout (seconds) and sees a :class:`HookContext`, never the key,
headers or base URL. The full rules are in ``providers/README.md`` ("Hooks").

Pure module: no Django, no I/O of its own.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from providers.errors import ProviderError, RequestBlockedError
from providers.types import AssistantResponse, ProviderRequest

logger = logging.getLogger(__name__)

DEFAULT_HOOK_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class HookContext:
    """What a hook learns about the call (never the key, headers or base URL).

    Attributes:
        provider: the provider's name (``"openai"``, ``"anthropic"``…).
        model: the model id.
        request: the neutral request (messages, tools, limits); treat it as read-only.
        call_id: a fresh id per ``stream()`` call, shared by its pre/post/error hooks.
    """

    provider: str
    model: str
    request: ProviderRequest
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(frozen=True, slots=True)
class Block:
    """A pre-request hook's refusal; ``reason`` becomes the error message the user reads."""

    reason: str


PreRequestHook = Callable[[HookContext], Awaitable["Block | None"]]
PostRequestHook = Callable[[HookContext, AssistantResponse], Awaitable[None]]
OnErrorHook = Callable[[HookContext, ProviderError], Awaitable[None]]

H = TypeVar("H", PreRequestHook, PostRequestHook, OnErrorHook)


@dataclass(frozen=True, slots=True)
class _Registered(Generic[H]):
    fn: H
    name: str
    timeout: float


def _name_of(fn: Callable[..., object]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


class ProviderHooks:
    """The hooks of one provider (see the module docstring).

    Args:
        timeout: default seconds a hook may take.

    The registration methods return the hook, so they work as decorators.
    """

    def __init__(self, timeout: float = DEFAULT_HOOK_TIMEOUT) -> None:
        self.timeout = timeout
        self._pre: list[_Registered[PreRequestHook]] = []
        self._post: list[_Registered[PostRequestHook]] = []
        self._error: list[_Registered[OnErrorHook]] = []

    def __bool__(self) -> bool:
        return bool(self._pre or self._post or self._error)

    @property
    def wants_response(self) -> bool:
        """Whether a post-request hook needs the assembled response."""
        return bool(self._post)

    def _entry(self, fn: H, name: str | None, timeout: float | None) -> _Registered[H]:
        return _Registered(fn, name or _name_of(fn), self.timeout if timeout is None else timeout)

    def pre_request(
        self, fn: PreRequestHook, *, name: str | None = None, timeout: float | None = None
    ) -> PreRequestHook:
        """Register ``async fn(ctx) -> Block | None``; returns ``fn``."""
        self._pre.append(self._entry(fn, name, timeout))
        return fn

    def post_request(
        self, fn: PostRequestHook, *, name: str | None = None, timeout: float | None = None
    ) -> PostRequestHook:
        """Register ``async fn(ctx, response) -> None``; returns ``fn``."""
        self._post.append(self._entry(fn, name, timeout))
        return fn

    def on_error(
        self, fn: OnErrorHook, *, name: str | None = None, timeout: float | None = None
    ) -> OnErrorHook:
        """Register ``async fn(ctx, error) -> None``; returns ``fn``."""
        self._error.append(self._entry(fn, name, timeout))
        return fn

    async def run_pre_request(self, ctx: HookContext) -> None:
        """Run the pre-request hooks in order.

        Raises:
            RequestBlockedError: a hook returned :class:`Block`, raised, or overran its timeout.
        """
        for hook in self._pre:
            try:
                async with asyncio.timeout(hook.timeout):
                    verdict = await hook.fn(ctx)
            except RequestBlockedError:
                raise
            except TimeoutError as exc:
                raise RequestBlockedError(
                    f"the request check {hook.name!r} did not answer within {hook.timeout:g}s", hook=hook.name
                ) from exc
            except Exception as exc:
                logger.exception("pre-request hook %s failed; blocking the call", hook.name)
                raise RequestBlockedError(
                    f"the request check {hook.name!r} failed ({type(exc).__name__})", hook=hook.name
                ) from exc
            if isinstance(verdict, Block):
                raise RequestBlockedError(verdict.reason or "blocked by a request check", hook=hook.name)

    async def run_post_request(self, ctx: HookContext, response: AssistantResponse) -> None:
        """Run the post-request hooks in order; failures are logged, never raised."""
        for hook in self._post:
            await self._observe(hook, "post-request", ctx, response)

    async def run_on_error(self, ctx: HookContext, error: ProviderError) -> None:
        """Run the on-error hooks in order; failures are logged, never raised."""
        for hook in self._error:
            await self._observe(hook, "on-error", ctx, error)

    @staticmethod
    async def _observe(hook: _Registered, kind: str, *args: object) -> None:
        try:
            async with asyncio.timeout(hook.timeout):
                await hook.fn(*args)
        except TimeoutError:
            logger.warning("%s hook %s overran %gs; ignored", kind, hook.name, hook.timeout)
        except Exception:
            logger.exception("%s hook %s failed; ignored", kind, hook.name)
