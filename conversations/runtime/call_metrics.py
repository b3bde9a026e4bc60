"""Provider calls and transport retries into the metrics (issue 17 "Metrics").

:func:`observe_call` is a ``providers.metering`` observer: each metered call counts once, with the
tokens and cost of ``conversations.usage.accounting.account`` (the provider's usage, else
estimated; the same numbers as the usage rows) under the preset the call was made on.
:func:`install` registers it and the retry observer (the app's ``ready``). No I/O: the preset
comes from the catalog already loaded in memory.
"""

from __future__ import annotations

import logging

from conversations.runtime.provider import preset_for
from conversations.usage.accounting import account
from picobot_site.metrics import instruments
from providers import metering
from providers.metering import ProviderCall
from providers.presets import ModelPreset

log = logging.getLogger(__name__)


def _preset(name: str) -> ModelPreset | None:
    """The call's preset for its prices; None when it is gone (a removed preset costs 0)."""
    try:
        preset = preset_for(name)
    except ValueError:  # the catalog cannot be read: counted without a cost
        return None
    return preset if preset.name == name else None


def observe_call(call: ProviderCall) -> None:
    """Count one metered call: by preset, kind and outcome; latency, time to first token,
    tokens by type and cost."""
    usage = account(call, _preset(call.preset))
    instruments.record_provider_call(
        call.preset,
        call.scope.kind,
        call.outcome,
        latency_s=call.latency_s,
        ttft_s=call.ttft_s,
        tokens={
            "input": usage.input_tokens,
            "output": usage.output_tokens,
            "cached": usage.cached_tokens,
            "reasoning": usage.reasoning_tokens,
        },
        cost=float(usage.cost),
    )


def observe_retry(retry: metering.ProviderRetry) -> None:
    """A transport retry into ``picobot_provider_retries_total``."""
    instruments.record_retry(retry.provider, retry.kind)


def install() -> None:
    """Observe every metered call and transport retry of this process (idempotent)."""
    metering.add_observer(observe_call)
    metering.add_retry_observer(observe_retry)
