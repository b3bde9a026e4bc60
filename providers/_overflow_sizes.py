"""The sizes a context-overflow error states, read from its words (pure; issue 17).

Whether an error *is* an overflow is decided elsewhere (``_errorbody.is_context_overflow``, by
code or wording); this module only reads the numbers the message gives, so the recovery can be
sized from what the provider refused (``conversations/agent/overflow_sizing.py``). Wordings read,
each seen in the wild:

* OpenAI, DeepSeek, vLLM: "This model's maximum context length is 8192 tokens. However, you
  requested 9000 tokens (5000 in the messages, 4000 in the completion)." — also "(…, 1000 in the
  functions, and 4000 in the completion)", "your messages resulted in 8202 tokens", the legacy
  "(4066 in your prompt; 256 for the completion)"
* vLLM: "…your request has 9000 input tokens…"; "'max_tokens' or 'max_completion_tokens' is too
  large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input
  tokens (8000 > 4096 - 2778)."; "The decoder prompt (length 17772) is longer than the maximum model
  length of 16384"
* OpenRouter: "This endpoint's maximum context length is 131072 tokens. However, you requested
  about 138956 tokens (7884 of text input, 131072 in the output)."
* Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"; "input length and `max_tokens`
  exceed context limit: 198000 + 8192 > 200000, decrease input length or `max_tokens` and try again"
* llama.cpp: "request (9412 tokens) exceeds the available context size (8192 tokens)" (and its
  error object's ``n_prompt_tokens`` / ``n_ctx``, which win)
* LM Studio: "Trying to keep the first 15857 tokens when context the overflows. However, the
  model is loaded with context length of only 4096 tokens…"; "(n_keep: 10247 >= n_ctx: 4096)"
* Mistral: "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768
  maximum context length"
* Gemini: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
* xAI: "This model's maximum prompt length is 131072 but the request contains 140000 tokens."
* Qwen DashScope: "Range of input length should be [1, 30720]"
* OpenAI (Responses): "Input tokens exceed the configured limit of 272000 tokens. Your messages
  resulted in 300000 tokens."

A number that is not stated but follows from two others (input = requested − output, …) is
filled in; unknown wording gives no sizes at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_N = r"(?<![\d,])(\d{1,3}(?:,\d{3})+(?!\d)|\d+)"  # 8192, or 1,048,576

# (field, pattern): the first pattern of a field that matches gives it.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (field, re.compile(pattern.replace("{n}", _N), re.IGNORECASE))
    for field, pattern in (
        ("limit", r"maximum context length (?:is|of) {n}"),
        ("limit", r"\d[\d,]* tokens? > {n} maximum"),
        ("limit", r"exceed context limit: \d[\d,]* \+ \d[\d,]* > {n}"),
        ("limit", r"available context size \({n} tokens\)"),
        ("limit", r"context length of only {n}"),
        ("limit", r"n_ctx: {n}"),
        ("limit", r"too large for model with {n} maximum context length"),
        ("limit", r"maximum number of tokens allowed \({n}\)"),
        ("limit", r"maximum prompt length is {n}"),
        ("limit", r"longer than the maximum model length of {n}"),
        ("limit", r"exceed the configured limit of {n} tokens"),
        ("limit", r"range of input length should be \[1, {n}\]"),
        ("requested", r"you requested (?:about )?{n} tokens"),
        ("prompt", r"prompt is too long: {n} tokens?"),
        ("prompt", r"exceed context limit: {n} \+"),
        ("prompt", r"your messages resulted in {n} tokens"),
        ("prompt", r"your request has {n} input tokens"),
        ("prompt", r"{n} in your prompt"),
        ("prompt", r"request \({n} tokens\) exceeds"),
        ("prompt", r"trying to keep the first {n} tokens"),
        ("prompt", r"n_keep: {n}"),
        ("prompt", r"prompt contains {n} tokens"),
        ("prompt", r"input token count \({n}\)"),
        ("prompt", r"the request contains {n} tokens"),
        ("prompt", r"prompt \(length {n}\)"),
        ("prompt", r"prompt length of {n}"),
        ("output", r"{n} (?:in|for) the completion"),
        ("output", r"{n} in the output"),
        ("output", r"exceed context limit: \d[\d,]* \+ {n}"),
        ("output", r"max_(?:completion_)?tokens'? (?:or 'max_completion_tokens' )?is too large: {n}"),
    )
)
# llama.cpp's error object carries the numbers as fields too.
_FIELDS = (("limit", "n_ctx"), ("prompt", "n_prompt_tokens"))


def overflow_sizes(message: str | None, fields: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The sizes an overflow error states, as ``ContextOverflowError`` keyword arguments.

    Args:
        message: the provider's error message (any wording; None or "" gives nothing).
        fields: the error object of a JSON body (llama.cpp's ``n_ctx``, ``n_prompt_tokens``), or None.

    Returns:
        ``{"limit_tokens", "requested_tokens", "prompt_tokens", "output_tokens"}``, each a
        positive count of the provider's tokens, only those stated or following from two stated
        ones; ``{}`` for unknown wording.
    """
    found: dict[str, int] = {}
    for field, key in _FIELDS:
        value = (fields or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found[field] = value
    for field, pattern in _PATTERNS if message else ():
        if field in found:
            continue
        match = pattern.search(message)
        if match is not None:
            found[field] = int(match.group(1).replace(",", ""))
    requested, prompt, output = (found.get(key) for key in ("requested", "prompt", "output"))
    if prompt is None and requested is not None and output is not None:
        found["prompt"] = requested - output
    elif output is None and requested is not None and prompt is not None:
        found["output"] = requested - prompt
    elif requested is None and prompt is not None and output is not None:
        found["requested"] = prompt + output
    return {f"{field}_tokens": value for field, value in found.items() if value > 0}
