"""Medians over repeats, the printed tables."""

from __future__ import annotations

import math
import statistics
from typing import Any


def median_merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The element-wise median of numeric leaves over ``runs``; other values from the first run."""
    first = runs[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        values = [run.get(key) for run in runs]
        if isinstance(value, bool) or value is None:
            out[key] = value
        elif isinstance(value, int | float):
            numbers = [
                v
                for v in values
                if isinstance(v, int | float) and not (isinstance(v, float) and math.isnan(v))
            ]
            out[key] = statistics.median(numbers) if numbers else float("nan")
        elif isinstance(value, dict) and all(isinstance(v, dict) for v in values):
            out[key] = median_merge(values)  # type: ignore[arg-type]
        else:
            out[key] = value
    return out


def _f(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}"


def _trio(d: dict[str, float]) -> str:
    return f"{_f(d.get('p50'), 1)} / {_f(d.get('p99'), 1)} / {_f(d.get('max'), 1)}"


def load_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| target | N | ok / turns | lost (kinds) | added latency p50 / p99 / max ms | TTFT p50 / p99 / max ms "
        "| send → LLM p50 ms | CPU s / 1000 chunks | peak RSS MiB | frames / turn |"
    )
    lines = [head, "|" + "---|" * 10]
    for row in rows:
        m = row["median"]
        if row["target"] == "layer-floor":
            lines.append(
                f"| layer-floor | {row['dialogs']} | {_f(m['received'])} / {_f(m['sent'])} msgs | lost {_f(m['lost'])} "
                f"| {_trio(m['latency_ms'])} | — | — | {_f(m['cpu_per_1000_chunks'], 3)} | {_f(m['peak_rss_mib'])} | — |"
            )
            continue
        kinds = ", ".join(f"{k} {_f(v)}" for k, v in m["lost"].items() if v) or "none"
        lines.append(
            f"| {row['target']} | {row['dialogs']} | {_f(m['ok'])} / {_f(m['turns'])} | {kinds} "
            f"| {_trio(m['latency_ms'])} | {_trio(m['ttft_ms'])} | {_f((m.get('send_to_llm_ms') or {}).get('p50'))} "
            f"| {_f(m['cpu_per_1000_chunks'], 3)} "
            f"| {_f(m['peak_rss_mib'])} | {_f(m['frames_per_turn'], 1)} |"
        )
    return "\n".join(lines)


def slow_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| target | N | others ok / turns | others added latency p50 / p99 / max ms | RSS MiB: start → peak → "
        "before close → 5 s after close |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        m = row["median"]
        s = m.get("slow_reader") or {}
        start = m["rss_samples"][0][1] if m.get("rss_samples") else float("nan")
        lines.append(
            f"| {row['target']} | {row['dialogs']} | {_f(m['ok'])} / {_f(m['turns'])} | {_trio(m['latency_ms'])} "
            f"| {_f(start)} → {_f(s.get('rss_peak_sampled_mib'))} → {_f(s.get('rss_before_close_mib'))} → "
            f"{_f(s.get('rss_5s_after_close_mib'))} |"
        )
    return "\n".join(lines)


def idle_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| target | opened / asked | RSS MiB before → open → closed | KiB per connection |",
        "|---|---|---|---|",
    ]
    for row in rows:
        m = row["result"]
        lines.append(
            f"| {row['target']} | {m['opened']} / {m['connections']} | {_f(m['rss_before_mib'])} → "
            f"{_f(m['rss_open_mib'])} → {_f(m['rss_after_close_mib'])} | {_f(m['kib_per_connection'], 1)} |"
        )
    return "\n".join(lines)


def churn_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| target | cycles (failed) | cycles/s | RSS MiB cold → after warm-up → each quarter → 5 s after | "
        "Redis clients cold → after warm-up → each quarter → 5 s after |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        m = row["result"]
        rss = " / ".join(_f(v) for v in m.get("rss_quarters_mib") or [])
        redis = " / ".join(_f(v) for v in m.get("redis_quarters") or [])
        lines.append(
            f"| {row['target']} | {m['cycles']} ({m['failed']}) | {_f(m['cycles_per_s'], 1)} | "
            f"{_f(m['rss_baseline_mib'])} → {_f(m['rss_after_warmup_mib'])} → {rss} → {_f(m['rss_after_mib'])} | "
            f"{_f(m['redis_clients_baseline'])} → {_f(m['redis_clients_after_warmup'])} → {redis} → "
            f"{_f(m['redis_clients_after'])} |"
        )
    return "\n".join(lines)
