"""Every PicoBot metric, defined once (issue 17 "Metrics"), and the functions that record them.

Pure: prometheus-client only (no Django). Import it only after ``picobot_site.settings`` chose the
mode: prometheus-client picks single- or multiprocess values when it is first imported
(``picobot_site.metrics.multiprocess``). Recording is cheap (a lock and an add; in multiprocess
mode a write to a memory-mapped file) and happens per turn, call, retry, tool call or failure,
never per streamed chunk.

Label values stay few: outcomes, stages, error kinds and channels are fixed sets, presets come from
the configuration, and a tool the registry does not know counts as ``unknown``. A value outside
its set raises ``ValueError`` (a programming error, not a runtime condition).

Token counters follow the usage rows (``conversations.usage.accounting``): ``type="input"``
includes the cached tokens (``type="cached"``), ``type="output"`` includes the reasoning tokens.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

disable_created_metrics()  # no ``*_created`` series: Prometheus needs none, they double the output

TURN_OUTCOMES = ("completed", "cancelled", "failed", "interrupted")
CALL_OUTCOMES = ("ok", "error", "closed")
DELIVERY_STAGES = ("open", "update", "finish", "fallback")
UNKNOWN_TOOL = "unknown"

TURNS = Counter("picobot_turns_total", "Turns ended, by outcome.", ["outcome"])

PROVIDER_CALLS = Counter(
    "picobot_provider_calls_total",
    "Provider calls (one stream, its transport retries included), by preset, kind and outcome.",
    ["preset", "kind", "outcome"],
)
PROVIDER_LATENCY = Histogram(
    "picobot_provider_latency_seconds",
    "Provider call duration, start to the stream's end, by preset.",
    ["preset"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
)
PROVIDER_TTFT = Histogram(
    "picobot_provider_ttft_seconds",
    "Provider call time to first output chunk, by preset (calls without output are not observed).",
    ["preset"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60),
)
PROVIDER_TOKENS = Counter(
    "picobot_provider_tokens_total",
    "Tokens of provider calls (the provider's usage, else estimated), by preset, kind and type "
    "(input includes cached, output includes reasoning).",
    ["preset", "kind", "type"],
)
PROVIDER_COST = Counter(
    "picobot_provider_cost_total",
    "Cost of provider calls in the currency of the preset's prices, by preset and kind.",
    ["preset", "kind"],
)
PROVIDER_RETRIES = Counter(
    "picobot_provider_retries_total",
    "Transport retries of a provider request, by provider and the error kind that caused them.",
    ["provider", "error"],
)
FALLBACKS = Counter(
    "picobot_fallbacks_total",
    "Turns that fell back from one preset to the next, by both presets and the error kind.",
    ["from_preset", "to_preset", "kind"],
)
TOOL_CALLS = Counter("picobot_tool_calls_total", "Tool calls run, by tool.", ["tool"])
TOOL_ERRORS = Counter("picobot_tool_errors_total", "Tool calls whose result is an error, by tool.", ["tool"])
DELIVERY_FAILURES = Counter(
    "picobot_delivery_failures_total",
    "Deliveries that failed after their retries (a DeliveryFailure row), by channel and stage.",
    ["channel", "stage"],
)
WEBSOCKETS_OPEN = Gauge(
    "picobot_websockets_open",
    "Authenticated chat WebSockets open now (summed over live processes).",
    multiprocess_mode="livesum",
)
LEASE_TAKEOVERS = Counter(
    "picobot_lease_takeovers_total",
    "Dialogs this process took over from a worker whose lease had lapsed.",
)
EVENT_LOOP_LAG = Histogram(
    "picobot_event_loop_lag_seconds",
    "How late the worker's event-loop timer fired, sampled every 50 ms.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)

INBOX_DEPTH = "picobot_inbox_depth"
"""Inbox rows by status (queued, started), counted at scrape time (``exposition``)."""

for _outcome in TURN_OUTCOMES:  # present at 0 from the start, so rate() sees the first turn
    TURNS.labels(_outcome)


def _member(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r} (one of {', '.join(allowed)})")
    return value


def record_turn(outcome: str) -> None:
    """One turn ended with ``outcome`` (one of :data:`TURN_OUTCOMES`; ValueError otherwise)."""
    TURNS.labels(_member(outcome, TURN_OUTCOMES, "turn outcome")).inc()


def record_provider_call(
    preset: str,
    kind: str,
    outcome: str,
    *,
    latency_s: float,
    ttft_s: float | None,
    tokens: dict[str, int],
    cost: float,
) -> None:
    """One metered provider call (``providers.metering.ProviderCall``).

    Args:
        preset, kind: the model preset and the call's kind (turn, title, compaction, probe).
        outcome: one of :data:`CALL_OUTCOMES`.
        latency_s, ttft_s: seconds; ``ttft_s`` None when no output came.
        tokens: ``{"input", "output", "cached", "reasoning"}`` → count (missing types count 0).
        cost: in the preset's price currency, ≥ 0.
    """
    PROVIDER_CALLS.labels(preset, kind, _member(outcome, CALL_OUTCOMES, "call outcome")).inc()
    PROVIDER_LATENCY.labels(preset).observe(latency_s)
    if ttft_s is not None:
        PROVIDER_TTFT.labels(preset).observe(ttft_s)
    for type_ in ("input", "output", "cached", "reasoning"):
        PROVIDER_TOKENS.labels(preset, kind, type_).inc(tokens.get(type_, 0))
    PROVIDER_COST.labels(preset, kind).inc(cost)


def record_retry(provider: str, error: str) -> None:
    """The transport retried a request of ``provider`` after an error of kind ``error``."""
    PROVIDER_RETRIES.labels(provider, error).inc()


def record_fallback(from_preset: str, to_preset: str, kind: str) -> None:
    """A turn left ``from_preset`` for ``to_preset`` after an error of kind ``kind``
    (``ProviderError.kind``: rate_limited, overloaded, server_error, timeout…)."""
    FALLBACKS.labels(from_preset, to_preset, kind).inc()


def record_tool_call(tool: str, *, error: bool) -> None:
    """One tool call ran; ``tool`` is the registry's name, or :data:`UNKNOWN_TOOL` for a name
    the registry does not know (the model's names are not trusted as labels)."""
    TOOL_CALLS.labels(tool).inc()
    if error:
        TOOL_ERRORS.labels(tool).inc()


def record_delivery_failure(channel: str, stage: str) -> None:
    """A delivery of ``channel`` failed at ``stage`` (one of :data:`DELIVERY_STAGES`)."""
    DELIVERY_FAILURES.labels(channel, _member(stage, DELIVERY_STAGES, "delivery stage")).inc()


def record_lease_takeover() -> None:
    """This process took over a dialog whose owner stopped renewing its lease."""
    LEASE_TAKEOVERS.inc()


def observe_loop_lag(seconds: float) -> None:
    """One event-loop lag sample (``delivery.load.LoopLagGauge``), seconds ≥ 0."""
    EVENT_LOOP_LAG.observe(max(0.0, seconds))
