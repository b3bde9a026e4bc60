"""Read a ``/metrics`` answer: samples by name and labels (prometheus-client's own parser)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text answer: ``(name, labels)`` → value."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name{labels}`` (exact label set), 0.0 when absent (a counter never moved)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much ``name{labels}`` grew between two scrapes."""
    return value(after, name, **labels) - value(before, name, **labels)
