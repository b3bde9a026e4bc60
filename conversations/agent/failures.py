"""Typed turn failures and the one place that words them for the user (seed 000 §13, seed 003 §14.2).

Every way a turn can fail is a :class:`TurnFailure` of one :class:`TurnFailureKind`;
:class:`TurnFailurePresenter` renders it as one short line ending with its reference id
(``"… (ref 1a2b3c4d)."``), and :func:`log_failure` writes its redacted ``detail`` as one log line
(``log_safety``). What the user may read of a provider's answer and what only the log holds:
``agent/README.md``. Pure: no Django.
"""

from __future__ import annotations

import logging
import re
import secrets
import unicodedata
from dataclasses import dataclass, field
from enum import StrEnum

from conversations.agent.log_safety import (
    configured_secrets,
    describe_exception,
    head_and_tail,
    log_safe,
    one_line,
)
from providers.errors import ProviderError, RequestBlockedError, ResponseTooLongError
from providers.redaction import redact

__all__ = [
    "TurnFailedError",
    "TurnFailure",
    "TurnFailureKind",
    "TurnFailurePresenter",
    "log_failure",
    "new_ref",
    "provider_failure_lead",
    "provider_failure_text",
    "shown_provider_message",
]

#: Bound of a presented message (before the ref); a provider's own words take at most 200 of it.
MAX_USER_MESSAGE_CHARS = 600
#: Bound of a failure's ``detail`` (a traceback can be long; the log needs its tail).
MAX_DETAIL_CHARS = 8000
#: Characters of a provider's own message the user reads at most (a longer one is cut, with "…").
MAX_PROVIDER_MESSAGE_CHARS = 200


class TurnFailureKind(StrEnum):
    """Why a turn failed (seed 000 §13, plus the kinds the executor also tells apart)."""

    INPUT_PERSISTENCE = "input_persistence"  # the user's message could not be stored
    AGENT_CREATION = "agent_creation"  # the agent (provider, tools) could not be set up
    CONTEXT_PREPARATION = "context_preparation"  # building the provider input failed
    PROVIDER = "provider"  # the model provider failed (typed ``ProviderError``)
    TOOL = "tool"  # a tool said the turn cannot go on (``ToolFatalError``)
    TIMEOUT = "timeout"  # the turn's own deadline passed
    TURN_PERSISTENCE = "turn_persistence"  # the turn's rows could not be committed
    DELIVERY = "delivery"  # the answer could not be delivered to the chat
    INTERNAL = "internal"  # a bug: anything else


#: What the user reads when a failure brings no wording of its own.
DEFAULT_MESSAGES: dict[TurnFailureKind, str] = {
    TurnFailureKind.INPUT_PERSISTENCE: "Your message could not be saved",
    TurnFailureKind.AGENT_CREATION: "The assistant could not be started",
    TurnFailureKind.CONTEXT_PREPARATION: "The conversation could not be prepared for the model",
    TurnFailureKind.PROVIDER: "The model provider failed",
    TurnFailureKind.TOOL: "A tool failed and the turn cannot go on",
    TurnFailureKind.TIMEOUT: "The turn took too long and was stopped",
    # seed 003 §14.2: say plainly that what streamed was a preview that history does not hold.
    TurnFailureKind.TURN_PERSISTENCE: (
        "The answer could not be saved; what was shown while it streamed is not in the history"
    ),
    TurnFailureKind.DELIVERY: "The answer could not be delivered",
    TurnFailureKind.INTERNAL: "Internal error",
}

_FAILURE_LEADS = {
    "server_error": "The model provider had a server error",
    "overloaded": "The model provider is overloaded",
    "rate_limited": "The model provider is rate limiting us",
    "authentication": "The model provider refused our credentials",
    "context_overflow": "The conversation is too long for the model",
    "timeout": "The model provider timed out",
    "connection": "The model provider could not be reached",
    "truncated": "The model provider's answer was cut off",
    "provider_error": "The model provider reported an error",
    "http_error": "The model provider sent an unexpected answer",
}


def new_ref() -> str:
    """A fresh reference id (8 hex characters) that ties a user-visible error to its log entry."""
    return secrets.token_hex(4)


def provider_failure_lead(error: ProviderError) -> str:
    """The user-facing start of a provider failure message, naming its kind (and HTTP status).

    A 500/502/504 reads as a server error and only 503/529 as "overloaded": the
    wording follows the error type, so the two are never confused.
    """
    lead = _FAILURE_LEADS.get(error.kind, "The model provider failed")
    status = f", HTTP {error.http_status}" if error.http_status and error.http_status != 200 else ""
    return f"{lead} ({error.kind}{status})"


def shown_provider_message(error: ProviderError) -> str:
    """The provider's own words the user may read, or ``""`` (``agent/README.md``).

    Only ``error.provider_message`` — the ``message`` of a JSON error body or of an in-band
    error event, whatever the kind or status — never our own wording of a transport failure, a
    plain-text or HTML body, the URL or the headers. Every URL cut to its scheme and host, then
    redacted (``providers.redaction`` with the deployment's secrets), control, format and
    line-separator characters taken out, whitespace made single spaces, and at most
    :data:`MAX_PROVIDER_MESSAGE_CHARS` characters (a longer one is cut and ends with "…").
    """
    text = error.provider_message
    if not isinstance(text, str):
        return ""
    # URLs first: redaction would take a URL's userinfo and the rest of it as one password.
    text = redact(_URL.sub(_scheme_and_host, text), configured_secrets())
    text = "".join(" " if unicodedata.category(ch) in _UNSHOWN else ch for ch in text)
    return _bounded(" ".join(text.split()), MAX_PROVIDER_MESSAGE_CHARS)


def provider_failure_text(error: ProviderError) -> str:
    """What the user reads of a provider failure, without the ref: the kind's lead and, when the
    provider said something, its words (:func:`shown_provider_message`).

    ``"The model provider reported an error (provider_error): upstream overloaded"``. The one
    wording of every provider failure a user sees: a failed turn, a failed ``/compact``.
    """
    lead = provider_failure_lead(error)
    message = shown_provider_message(error)
    return f"{lead}: {message}" if message else lead


# Control (C0/C1), format (bidi marks and overrides, zero-width), surrogate and line/paragraph
# separator characters: none of them belongs in a one-line notice.
_UNSHOWN = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
# A URL: only its scheme and host are shown (its userinfo, path and query may hold a key).
_URL = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?:[^\s/?#@]*@)?(?P<host>[^\s/?#@:]*)(?P<rest>[^\s]*)"
)


def _scheme_and_host(match: re.Match[str]) -> str:
    """``scheme://host`` of a URL; ``scheme://[redacted]`` when what looks like a host is the
    user name of userinfo the provider layer already redacted (``user:[redacted]``)."""
    rest = match["rest"]
    if rest.startswith(":") and not rest[1:2].isdigit():
        return f"{match['scheme']}://[redacted]"
    return f"{match['scheme']}://{match['host']}"


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the failure ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnFailure:
    """One typed turn failure (seed 000 §13).

    Attributes:
        kind: why the turn failed.
        user_message: what the user reads (without the ref); "" means the kind's default wording.
        ref: the reference id shown to the user and written to the log.
        detail: the raw cause, for the server log only; redacted when the failure is built, and
            at most ``MAX_DETAIL_CHARS`` long (a longer one keeps its head and its tail).
    """

    kind: TurnFailureKind
    user_message: str = ""
    ref: str = field(default_factory=new_ref)
    detail: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", TurnFailureKind(self.kind))
        detail = redact(self.detail, configured_secrets())
        object.__setattr__(self, "detail", head_and_tail(detail, MAX_DETAIL_CHARS))

    @classmethod
    def of(cls, kind: TurnFailureKind | str, *, user_message: str = "", detail: str = "") -> TurnFailure:
        """A failure of ``kind`` with a fresh ref."""
        return cls(TurnFailureKind(kind), user_message, new_ref(), detail)

    @classmethod
    def from_exception(
        cls,
        kind: TurnFailureKind | str,
        exc: BaseException,
        *,
        user_message: str = "",
        traceback: bool = True,
    ) -> TurnFailure:
        """A failure caused by ``exc``: the user gets the kind's wording, the log the exception."""
        return cls.of(
            kind, user_message=user_message, detail=describe_exception(exc, with_traceback=traceback)
        )

    @classmethod
    def provider(cls, error: ProviderError) -> TurnFailure:
        """A provider failure: its kind and HTTP status for the user, plus the provider's
        own message when it sent one (:func:`provider_failure_text`).

        A blocked request shows its hook's reason (our own words, nothing from upstream); an
        answer over the turn's output cap says so with the cap ("The answer and its reasoning
        were longer than 1000000 characters and were cut off"). The provider's message, the vendor code, retry hints and the cause chain (e.g. an ``httpx``
        error with its URL) stay in ``detail``, on one line.
        """
        if isinstance(error, RequestBlockedError):
            message = " ".join(str(error.message or "").split())
            user = f"The request was blocked before reaching the model: {message}"
        elif isinstance(error, ResponseTooLongError):
            user = (
                f"The answer and its reasoning were longer than {error.max_chars} characters and were cut off"
            )
        else:
            user = provider_failure_text(error)
        detail = (
            f"{type(error).__name__} kind={error.kind} http_status={error.http_status} "
            f"provider_code={error.provider_code!r} retryable={error.retryable} "
            f"retry_after_s={error.retry_after_s}"
            + (f" hook={error.hook}" if isinstance(error, RequestBlockedError) else "")
            # Redacted before it is made one line: an escaped ``Bearer\\t…`` would hide the key.
            + f": {one_line(redact(describe_exception(error), configured_secrets()))}"
        )
        return cls.of(TurnFailureKind.PROVIDER, user_message=user, detail=detail)


class TurnFailedError(Exception):
    """Raised inside a turn (e.g. by the input builder) to end it with a typed failure.

    The executor's ``_run_and_commit`` catches it and presents ``failure`` like any other.
    """

    def __init__(self, failure: TurnFailure) -> None:
        super().__init__(f"{failure.kind}: {failure.user_message or DEFAULT_MESSAGES[failure.kind]}")
        self.failure = failure


class TurnFailurePresenter:
    """Renders a :class:`TurnFailure` for the user (seed 000 §13: one presenter for every failure).

    The result is one short line, ``"<what happened> (ref <ref>)."``: redacted again, bounded,
    never a traceback or a raw storage error. The same text becomes the turn's ``error`` (and so
    the terminal snapshot's, the fallback message's and the inbox row's).
    """

    def present(self, failure: TurnFailure) -> str:
        """The user-facing message of ``failure``, ending with its reference id."""
        text = failure.user_message.strip() or DEFAULT_MESSAGES[failure.kind]
        text = _bounded(
            one_line(redact(" ".join(text.split()), configured_secrets())), MAX_USER_MESSAGE_CHARS
        )
        return f"{text.rstrip('.')} (ref {failure.ref})."

    def notice(self, failure: TurnFailure) -> str | None:
        """The chat notification a failure needs besides the turn's own error, or None.

        Only a turn whose commit failed gets one (seed 003 §14.2: the user is told that the
        streamed preview was not saved — also when the turn's live view is gone).
        """
        if failure.kind is TurnFailureKind.TURN_PERSISTENCE:
            return (
                f"Storage failed; this turn was not saved, so the answer shown while it streamed is not "
                f"in the history (ref {failure.ref})."
            )
        return None


_EXPECTED = {
    TurnFailureKind.PROVIDER,
    TurnFailureKind.TIMEOUT,
    TurnFailureKind.TOOL,
    TurnFailureKind.DELIVERY,
}


def log_failure(logger: logging.Logger, turn_id: str, failure: TurnFailure) -> None:
    """One server-log line per failure: kind, ref and the redacted detail, on one line.

    Outside causes (provider, timeout, tool, delivery) are warnings; our own (storage, bugs)
    are errors. No ``exc_info``: the traceback is already in ``detail``, redacted; it is written
    through :func:`log_safe` (line breaks, ANSI and bidi escaped, bounded), whatever kind of
    failure it is, so a tool's or a storage error's words cannot forge log lines.
    """
    level = logging.WARNING if failure.kind in _EXPECTED else logging.ERROR
    logger.log(
        level,
        "turn %s failed [%s] (ref %s): %s",
        log_safe(turn_id, 200),
        failure.kind.value,
        failure.ref,
        log_safe(failure.detail),
    )
