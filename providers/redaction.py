"""Credentials out of text: the one redaction rule set (DESIGN §9; seed 000 §13).

Pure (standard library only; ``providers`` imports nothing of ours). :func:`redact` replaces
anything that looks like a credential with ``[redacted]``: configured secrets verbatim (when
:func:`looks_like_secret`), auth headers and schemes, vendor key prefixes, ``name=value`` and
``name: value`` pairs of credential names, cookies, PEM private keys and URL userinfo. It is
idempotent, and it errs towards redacting too much. Used on provider error messages
(``providers._http``) and on everything the conversations app logs or shows
(``conversations.agent.failures``, the storage runner, the lease keeper).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["looks_like_secret", "redact"]

_REDACTED = "[redacted]"
# Compound names whose last part names a credential: ``aws_secret_access_key``, ``x-api-key``,
# ``Ocp-Apim-Subscription-Key``, ``session_token``, ``db-password`` (not ``max_tokens``: the
# name must end there). Those ending in ``key``/``token`` are also ordinary words in prose
# (``task-key: in``), so their ``name: value`` counts only for a credential-shaped value.
_SUFFIXED = r"(?:[A-Za-z0-9]+[_\-])+(?:key|token|secret|password|passwd|credentials?)"
_SUFFIXED_STRONG = r"(?:[A-Za-z0-9]+[_\-])+(?:secret|password|passwd|credentials?)"
_SUFFIXED_WEAK = r"(?:[A-Za-z0-9]+[_\-])+(?:key|token)"
# Names whose ``name=value`` is a credential (query parameters, form bodies, DSNs, log lines).
_ASSIGNED = (
    r"api[_-]?key|apikey|key|access[_-]?token|refresh[_-]?token|id[_-]?token|token|secret|client[_-]?secret"
    r"|password|passwd|pass|pwd|passphrase|user|username|user[_-]name|login|credentials?"
    r"|sig|signature|x-amz-signature|x-amz-credential|authorization|proxy-authorization|" + _SUFFIXED
)
# Names whose ``name: value`` is always a credential (HTTP headers, JSON/YAML fields, log lines).
_LABELLED = (
    r"authorization|proxy-authorization|x-api-key|api[ _-]?key|apikey|x-goog-api-key|access[_-]?token"
    r"|refresh[_-]?token|client[_-]?secret|password|passwd|pwd|passphrase|secret[_-]?key|credentials?|"
    + _SUFFIXED_STRONG
)
# Names that are also ordinary prose (``the key: value pair``, ``user: please``, ``pass: through``,
# ``task-key: in``): their ``name: value`` is a credential only when the value is quoted (a JSON
# or YAML field: ``"user": "admin"``) or looks like one (:data:`_SHAPED`).
_BARE = r"key|token|secret|pass|user|username|user[_-]name|login|" + _SUFFIXED_WEAK
# A value that looks like a credential: a digit, ``-`` or ``_`` in it and 6+ characters, or 20+.
_SHAPED = r"""(?=[^\s"',;}]*[0-9_\-][^\s"',;}]*(?<=[^\s"',;}]{6})|[^\s"',;}]{20})"""
# An auth scheme before the credential: ``Authorization: Bearer …``, ``Bearer%20…`` in a URL.
_SCHEME = r"(?:(?:Bearer|Basic|Token|Digest)(?:\s+|%20))?"
# Vendor key prefixes, each followed by the key's random part.
_PREFIXED = (
    # Groq ``gsk_``, xAI ``xai-``, Hugging Face ``hf_``, GitHub ``ghp_`` ``gho_`` ``ghu_`` ``ghs_``
    # ``ghr_`` ``github_pat_``, Fireworks ``fw_``: 12+ characters.
    r"\b(gsk_|xai-|hf_|gh[pousr]_|github_pat_|fw_)[A-Za-z0-9_\-]{12,}"
    # Stripe secret/restricted ``sk_live_`` ``sk_test_`` ``rk_live_`` ``rk_test_``, Slack
    # ``xoxb-`` ``xoxp-`` ``xoxa-`` ``xoxr-`` ``xoxs-``, GitLab ``glpat-``, Replicate ``r8_``,
    # Perplexity ``pplx-``, NVIDIA ``nvapi-``: 16+ characters, so ``pplx-api-docs`` stays.
    r"|\b(sk_live_|sk_test_|rk_live_|rk_test_|xox[abprs]-|glpat-|r8_|pplx-|nvapi-)[A-Za-z0-9_\-]{16,}"
)


def _prefixed(match: re.Match[str]) -> str:
    return (match.group(1) or match.group(2)) + _REDACTED


def _bare_basic(match: re.Match[str]) -> str:
    """``Basic <base64>`` without its header name: redacted when the word looks like base64 (a
    digit, ``+``, ``/`` or ``=`` in it, or a capital after its first letter), so ``Basic
    authentication`` stays."""
    token = match.group(2)
    if any(c.isdigit() or c in "+/=" for c in token) or any(c.isupper() for c in token[1:]):
        return match.group(1) + " " + _REDACTED
    return match.group()


_PATTERNS: tuple[tuple[re.Pattern[str], Any], ...] = (
    # PEM private keys, to their END line (or the end of the text, when it was cut).
    (
        re.compile(r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)", re.DOTALL),
        _REDACTED,
    ),
    # ``Cookie: session=…``, ``Set-Cookie: id=…``: the whole header value (to a quote or the line end).
    (
        re.compile(
            r"""(?<![A-Za-z0-9_\-])((?:set-)?cookie)(["']?\s*:\s*["']?)(?!\[redacted\])(?=[^\r\n"']*=)[^\r\n"']+""",
            re.IGNORECASE,
        ),
        r"\1\2" + _REDACTED,
    ),
    # ``"user": "admin"``, ``'token': 'x'``: a prose-like name with a quoted value (see ``_BARE``).
    (
        re.compile(
            rf"""(?<![A-Za-z0-9_\-])({_BARE})(["']?\s*:\s*["']){_SCHEME}(?!\[redacted\])[^\s"',;}}]+""",
            re.IGNORECASE,
        ),
        r"\1\2" + _REDACTED,
    ),
    # ``key: ZZZ-my-secret-value``, ``pass: hunter2``: a prose-like name, a credential-shaped value.
    (
        re.compile(
            rf"""(?<![A-Za-z0-9_\-])({_BARE})(["']?\s*:\s*["']?){_SCHEME}(?!\[redacted\]){_SHAPED}[^\s"',;}}]+""",
            re.IGNORECASE,
        ),
        r"\1\2" + _REDACTED,
    ),
    # ``Authorization: Bearer …``, ``"api_key": "…"``, ``x-api-key: …``: the whole value, scheme included.
    (
        re.compile(
            rf"""(?<![A-Za-z0-9_\-])({_LABELLED})(["']?\s*:\s*["']?){_SCHEME}"""
            rf"""(?!\[redacted\])[^\s"',;}}]+""",
            re.IGNORECASE,
        ),
        r"\1\2" + _REDACTED,
    ),
    # ``api-key abcd1234…``: a key name, a space and a credential-shaped value.
    (
        re.compile(
            rf"""(?<![A-Za-z0-9_\-])(x-api-key|api[_-]?key|apikey|access[_-]?token|secret[_-]?key)(\s+)"""
            rf"""(?!\[redacted\]){_SHAPED}[^\s"',;}}]+""",
            re.IGNORECASE,
        ),
        r"\1\2" + _REDACTED,
    ),
    # ``Bearer …`` wherever else it appears (a repr of a request, a curl line, ``Bearer%20…``).
    (
        re.compile(r"\b(Bearer)(?:\s+|%20)(?!\[redacted\])[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE),
        r"\1 " + _REDACTED,
    ),
    # ``Basic dXNlcjpwYXNz`` wherever else it appears (``_bare_basic``).
    (
        re.compile(r"\b(Basic)(?:\s+|%20)(?!\[redacted\])([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
        _bare_basic,
    ),
    # OpenAI / Anthropic / OpenRouter style keys: ``sk-…``, ``sk-ant-…``, ``sk-proj-…``, ``sk-or-v1-…``.
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), "sk-" + _REDACTED),
    (re.compile(_PREFIXED), _prefixed),
    # Google API keys.
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"), _REDACTED),
    # AWS access key ids (long-term ``AKIA…``, temporary ``ASIA…``).
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), _REDACTED),
    # A query parameter ``?key=…``/``&token=…``: the whole value, to the next ``&``, ``#`` or space
    # (a ``,`` or ``;`` inside it is still the value).
    (
        re.compile(rf"(?<=[?&])({_ASSIGNED})={_SCHEME}(?!\[redacted\])[^&#\s]+", re.IGNORECASE),
        r"\1=" + _REDACTED,
    ),
    # ``key=…``, ``token=…``, ``api_key=…``, ``aws_secret_access_key=…`` (form bodies, log lines).
    (
        re.compile(
            rf"(?<![A-Za-z0-9_\-])({_ASSIGNED})\s*=\s*{_SCHEME}(?!\[redacted\])[^&#\s'\",;]+", re.IGNORECASE
        ),
        r"\1=" + _REDACTED,
    ),
    # URL userinfo: ``https://user:pass@host``, ``postgres://svc@host`` (a user name alone too),
    # ``redis://:hunter2@host`` (a password alone); not ``mailto://alice@example.com``.
    (
        re.compile(r"(?<=//)(?<!(?i:mailto)://)(?!\[redacted\]@)(?:[^/@\s:]+(?::[^/@\s]*)?|:[^/@\s]*)@"),
        _REDACTED + "@",
    ),
)

_PLACEHOLDERS = frozenset(
    {
        "ollama",
        "empty",
        "none",
        "null",
        "test",
        "testing",
        "dummy",
        "fake",
        "placeholder",
        "changeme",
        "secret",
        "password",
        "apikey",
        "api-key",
        "api_key",
        "token",
        "key",
        "xxx",
        "unused",
        "not-needed",
        "no-key",
        "nokey",
        "lm-studio",
        "lmstudio",
        "local",
        "sk-no-key-required",
        "sk-xxx",
        "sk-dummy",
    }
)
"""Placeholder API keys of local servers and examples: never treated as secrets to redact."""


def looks_like_secret(value: str) -> bool:
    """Whether a configured value is worth redacting verbatim wherever it appears.

    Local servers take any key, so ``LLM_API_KEY`` is often a word (``ollama``, ``EMPTY``,
    ``none``, ``test``) that also appears in ordinary messages (``model 'ollama/llama3' not
    found``). A value counts when it is not a known placeholder (:data:`_PLACEHOLDERS`, any
    case) and is 12+ characters long, or 8+ with a digit in it.
    """
    if not value or value.strip().lower() in _PLACEHOLDERS:
        return False
    return len(value) >= 12 or (len(value) >= 8 and any(c.isdigit() for c in value))


def redact(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with anything that looks like a credential replaced by ``[redacted]``.

    Covers ``known`` secrets verbatim in any case (the configured API key, when :func:`looks_like_secret`:
    placeholders and short words are not), ``Bearer`` credentials (``Bearer%20…`` too) and
    base64 ``Basic`` ones, vendor keys by their prefix (``sk-…``, ``gsk_…``, ``xai-…``,
    ``hf_…``, ``ghp_…``/``gho_…``/``github_pat_…``, ``fw_…``, ``sk_live_…``/``rk_live_…``,
    ``xoxb-…``/``xoxp-…``, ``glpat-…``, ``r8_…``, ``pplx-…``, ``nvapi-…``, Google ``AIza…``, AWS
    ``AKIA…``), ``name=value`` and ``name: value`` pairs whose name is or ends in a credential
    word (``aws_secret_access_key=``, ``X-Api-Key:``, ``Ocp-Apim-Subscription-Key:``),
    ``api-key <value>``, ``Cookie:``/``Set-Cookie:`` values, and URL userinfo
    (``redis://:pw@host`` too). A credential word without a value (``invalid key provided``) is
    left alone, and so is a prose-like name (``key``, ``token``, ``user``, ``pass``,
    ``task-key``…) before an ordinary word (``user: please``), unless the value is quoted or
    credential-shaped. Over-redaction is accepted; a leaked key is not.
    """
    if not text:
        return text
    for secret in known:
        if looks_like_secret(secret):
            # Any case: a provider may echo the key upper-cased (``SK-…``) in its error text.
            text = re.sub(re.escape(secret), _REDACTED, text, flags=re.IGNORECASE)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
