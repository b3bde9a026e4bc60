"""Prometheus metrics (issue 17 "Metrics"): every metric defined once (``instruments``), the
multiprocess switch (``multiprocess``), the scrape (``exposition``) and ``GET /metrics`` (``views``).
"""
