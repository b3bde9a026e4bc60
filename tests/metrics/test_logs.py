"""Structured logs (issue 17): JSON lines with the turn's ids, and no secret in them."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from picobot_site.log_format import JsonLogFormatter, TurnScopeFilter
from providers.metering import CallScope, call_scope
from tests.e2e.serve_process import REPO, server_env

SECRET = "Zq9house0key1234567890"  # no vendor prefix: only the configured secret gives it away


def json_logger(out: io.StringIO) -> logging.Logger:
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLogFormatter())
    handler.addFilter(TurnScopeFilter())
    logger = logging.getLogger("tests.metrics.json")
    logger.handlers = [handler]
    logger.propagate = False
    return logger


def lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_line_logged_in_a_turn_carries_its_dialog_and_turn_ids():
    out = io.StringIO()
    logger = json_logger(out)
    logger.info("before")
    with call_scope(CallScope("turn", "cli_chat:7:abc", "turn-1", 7, "cli_chat")):
        logger.warning("inside %s", "the turn")
        with call_scope(kind="compaction"):
            logger.info("compacting")
    before, inside, compacting = lines(out)
    assert (before["dialog_id"], before["turn_id"]) == ("", "")
    assert inside["message"] == "inside the turn" and inside["level"] == "WARNING"
    assert inside["logger"] == "tests.metrics.json" and inside["time"]
    assert (inside["dialog_id"], inside["turn_id"]) == ("cli_chat:7:abc", "turn-1")
    assert (compacting["dialog_id"], compacting["turn_id"]) == ("cli_chat:7:abc", "turn-1")


def test_a_configured_secret_never_reaches_the_json_output(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_api_key=SecretStr(SECRET))
    out = io.StringIO()
    logger = json_logger(out)
    logger.error("provider said: bad key %s", SECRET, extra={"detail": {"echo": [SECRET]}})
    try:
        raise RuntimeError(f"upstream refused {SECRET}")
    except RuntimeError:
        logger.exception("call failed")
    text = out.getvalue()
    assert SECRET not in text
    first, second = lines(out)
    assert first["message"] == "provider said: bad key [redacted]"
    assert first["detail"] == {"echo": ["[redacted]"]}
    assert "upstream refused [redacted]" in second["exc_info"]


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_picobot_log_format_chooses_the_root_handlers_format(tmp_path: Path, log_format: str):
    code = "import django, logging; django.setup(); logging.getLogger('probe').warning('hello %s', 'there')"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=server_env(tmp_path, {"PICOBOT_LOG_FORMAT": log_format}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    last = done.stderr.strip().splitlines()[-1]
    if log_format == "json":
        line = json.loads(last)
        assert (line["level"], line["logger"], line["message"]) == ("WARNING", "probe", "hello there")
        assert (line["dialog_id"], line["turn_id"]) == ("", "")
    else:
        assert last.endswith("WARNING probe: hello there")


@pytest.mark.django_db
def test_an_object_in_a_log_record_is_written_redacted(client):
    """django.request logs a refused request with ``extra={"request": <ASGIRequest …>}``: its
    text holds the query string, where an API token may travel (``?token=``)."""
    token = "pb_Q3kd9sXv0aLm2Yp7Rt4Wz8Nc6Hb1Fe5Gj"
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLogFormatter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        answer = client.get(f"/api/usage?group_by=day&token={token}")
    finally:
        logger.removeHandler(handler)
    assert answer.status_code == 401
    (line,) = lines(out)
    assert token not in out.getvalue() and "/api/usage?group_by=day&token=[redacted]" in line["request"]
    assert isinstance(line["time"], str) and line["status_code"] == 401
