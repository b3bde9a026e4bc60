"""The text ``GET /metrics`` answers (Prometheus text format 0.0.4; issue 17 "Metrics").

Pure: prometheus-client only; the inbox count is passed in as a callable (the view's one query).
In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set, see ``multiprocess``) the numbers are the
sum over every process's files, live and dead (gauges: live processes only); otherwise this
process's registry, with Python's process and GC collectors.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from picobot_site.metrics import instruments

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

InboxCounts = Callable[[], dict[str, int]]
"""Returns inbox rows by status, ``{"queued": n, "started": m}``; may raise (the scrape fails)."""

INBOX_STATUSES = ("queued", "started")


class InboxDepthCollector(Collector):
    """``picobot_inbox_depth{status}``, counted when scraped (one query through ``counts``)."""

    def __init__(self, counts: InboxCounts) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        counts = self.counts()
        family = GaugeMetricFamily(
            instruments.INBOX_DEPTH,
            "Inbox rows by status: queued (waiting for their turn) and started (running).",
            labels=["status"],
        )
        for status in INBOX_STATUSES:
            family.add_metric([status], counts.get(status, 0))
        yield family


def render(inbox_counts: InboxCounts) -> bytes:
    """Every metric of the deployment (multiprocess) or of this process, plus the inbox depth."""
    scrape = CollectorRegistry()
    scrape.register(InboxDepthCollector(inbox_counts))
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(scrape)
        return generate_latest(scrape)
    return generate_latest(_Both(REGISTRY, scrape))


class _Both:
    """Two registries as one for ``generate_latest`` (their metric names never overlap)."""

    def __init__(self, *registries: CollectorRegistry) -> None:
        self.registries = registries

    def collect(self) -> Iterable[Metric]:
        for registry in self.registries:
            yield from registry.collect()
