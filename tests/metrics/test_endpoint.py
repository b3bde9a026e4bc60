"""``GET /metrics``: off without a token, 401 without the right bearer, the text format with it (issue 17)."""

from __future__ import annotations

import pytest
from django.test import Client

from conversations import storage
from conversations.auth import get_or_create_user
from picobot_site.metrics.exposition import CONTENT_TYPE
from tests.metrics.conftest import METRICS_TOKEN
from tests.metrics.scrape import parse, value

pytestmark = [pytest.mark.django_db]


def scrape(client: Client, authorization: str | None = f"Bearer {METRICS_TOKEN}", path: str = "/metrics"):
    headers = {"Authorization": authorization} if authorization is not None else {}
    return client.get(path, headers=headers)


def test_without_a_token_setting_metrics_are_off():
    answer = scrape(Client())
    assert answer.status_code == 404
    assert b"picobot_" not in answer.content


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", f"Basic {METRICS_TOKEN}", f"Bearer {METRICS_TOKEN}x", "Bearer wrong"],
)
def test_a_missing_or_wrong_bearer_token_is_401(metrics_on, authorization):
    answer = scrape(Client(), authorization)
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"].startswith("Bearer")
    assert b"picobot_" not in answer.content


def test_the_right_token_gets_every_metric_in_the_text_format(metrics_on):
    answer = scrape(Client(), f"bearer  {METRICS_TOKEN}")  # the scheme is case-insensitive
    assert answer.status_code == 200
    assert answer["Content-Type"] == CONTENT_TYPE
    text = answer.content.decode()
    for name in (
        "picobot_turns_total",
        "picobot_provider_calls_total",
        "picobot_provider_latency_seconds",
        "picobot_provider_ttft_seconds",
        "picobot_provider_tokens_total",
        "picobot_provider_cost_total",
        "picobot_provider_retries_total",
        "picobot_fallbacks_total",
        "picobot_tool_calls_total",
        "picobot_tool_errors_total",
        "picobot_delivery_failures_total",
        "picobot_websockets_open",
        "picobot_inbox_depth",
        "picobot_lease_takeovers_total",
        "picobot_event_loop_lag_seconds",
    ):
        assert f"# TYPE {name} " in text, name
    samples = parse(text)
    assert ("picobot_turns_total", frozenset({("outcome", "interrupted")})) in samples  # present at 0


def test_a_scraper_needs_no_session_csrf_or_trailing_slash(metrics_on):
    client = Client(enforce_csrf_checks=True)
    assert scrape(client).status_code == 200
    assert scrape(client, path="/metrics/").status_code == 404  # no redirect to follow
    assert client.head("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).status_code == 200
    assert client.post("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).status_code == 405


def test_inbox_depth_counts_the_queued_rows_at_scrape_time(metrics_on):
    user, _ = get_or_create_user("dora")
    assert value(parse(scrape(Client()).content.decode()), "picobot_inbox_depth", status="queued") == 0
    for n in range(3):
        storage.accept_message(user, "cli_chat", str(user.pk), f"message {n}", client_msg_id=f"q-{n}")
    samples = parse(scrape(Client()).content.decode())
    assert value(samples, "picobot_inbox_depth", status="queued") == 3
    assert value(samples, "picobot_inbox_depth", status="started") == 0
