"""What one provider call used and cost: :func:`account` (pure: no Django, no I/O).

The provider's own usage wins; a call that reported none (a cut-off stream, a server that never
sends usage) is estimated from its request and streamed output with the context estimator
(``context.tokens``, on the safe side) and marked ``estimated``. A call that failed or was closed
before any output and reported no usage (a 429, an overload, no connection, a refused overflow)
used nothing: vendors do not bill a refused request, so it counts 0 tokens and costs nothing. Cost follows the preset's prices
(``ModelPreset.cost``; issue 17 "Public surface"). Usage rows and metrics both count through here,
so the two always agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from conversations.context.tokens import estimate_request, estimate_text
from providers.metering import ProviderCall
from providers.presets import ModelPreset


@dataclass(frozen=True, slots=True)
class CallUsage:
    """Tokens and cost of one call. ``input_tokens`` includes ``cached_tokens``."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    estimated: bool
    cost: Decimal


def account(call: ProviderCall, preset: ModelPreset | None) -> CallUsage:
    """The call's tokens (the provider's, else estimated) and their cost under ``preset``'s
    prices (0 without a preset: one the operator removed since)."""
    usage = call.usage
    if usage is not None:
        input_tokens, output_tokens = usage.input_tokens, usage.output_tokens
        cached, reasoning, estimated = usage.cached_tokens, usage.reasoning_tokens, False
    elif call.outcome != "ok" and not call.output_text:
        input_tokens = output_tokens = cached = reasoning = 0
        estimated = False
    else:
        input_tokens = estimate_request(call.request.messages, call.request.tools)
        output_tokens = estimate_text(call.output_text) if call.output_text else 0
        cached, reasoning, estimated = 0, 0, True
    cached = min(cached, input_tokens)
    cost = preset.cost(input_tokens, output_tokens, cached) if preset is not None else Decimal(0)
    return CallUsage(input_tokens, output_tokens, cached, reasoning, estimated, cost)
