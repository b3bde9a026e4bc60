"""Log records that name their turn, and the JSON log format (issue 17 "Metrics": structured logs).

:class:`TurnScopeFilter` (on the root handler, both formats) gives every record ``dialog_id`` and
``turn_id`` from the provider call scope (``providers.metering.CALL_SCOPE``: the executor sets it
for a turn's work, the title and compaction services for theirs); "" outside any scope.

:class:`JsonLogFormatter` (``PICOBOT_LOG_FORMAT=json``) writes one JSON object a line with
``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``dialog_id``, ``turn_id``, any ``extra`` fields and
``exc_info``. Every string in it goes through the same redaction as the rest of the log
(``conversations.agent.log_safety``: ``providers.redaction`` plus the deployment's configured
secrets), so a secret that reached a message, an argument or a traceback is not written. Reasoning
and provider payloads are kept out by the call sites (DESIGN §6), as in the text format.

Pure: standard library, python-json-logger and our pure redaction only.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from pythonjsonlogger.json import JsonFormatter

from conversations.agent.log_safety import configured_secrets
from providers.metering import CALL_SCOPE
from providers.redaction import redact

JSON_FORMAT = "%(levelname)s %(name)s %(message)s %(dialog_id)s %(turn_id)s"
JSON_RENAMES = {"levelname": "level", "name": "logger"}


class TurnScopeFilter(logging.Filter):
    """Adds ``dialog_id`` and ``turn_id`` (strings, "" outside a turn) to every record; never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        scope = CALL_SCOPE.get()
        if not hasattr(record, "dialog_id"):
            record.dialog_id = scope.dialog_id if scope is not None else ""
        if not hasattr(record, "turn_id"):
            record.turn_id = scope.turn_id if scope is not None else ""
        return True


class JsonLogFormatter(JsonFormatter):
    """python-json-logger's formatter with our field names and every string value redacted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("rename_fields", JSON_RENAMES)
        kwargs.setdefault("timestamp", "time")  # ISO 8601, UTC
        super().__init__(JSON_FORMAT if not args else args[0], *args[1:], **kwargs)

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        secrets = configured_secrets()
        return {key: _redacted(value, secrets) for key, value in log_data.items()}


def _redacted(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {key: _redacted(item, secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item, secrets) for item in value]
    if value is None or isinstance(value, bool | int | float | datetime.date | datetime.time):
        return value
    # Any other object (``extra={"request": <ASGIRequest …?token=…>}`` of django.request) would
    # be written as its str(): redact that text, never the raw object.
    return redact(str(value), secrets)
