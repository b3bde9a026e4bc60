"""What Django's error reports (the ``PICOBOT_DEBUG=1`` page, mailed reports) may show of the settings.

Django hides settings whose names look secret (``KEY``, ``PASS``, ``TOKEN`` …). The Redis URL and
the channel layer's configuration hold the Redis password under names that do not, so they are
hidden too; ``settings.PICOBOT`` shows its keys and database/Redis URLs masked (``SecretStr``)
and leaves out the LLM base URL (it may carry credentials).
"""

from __future__ import annotations

import re

from django.views.debug import SafeExceptionReporterFilter


class PicoBotReporterFilter(SafeExceptionReporterFilter):
    """Django's filter (its names, ``AUTH`` included: the request's ``Authorization`` header),
    also hiding ``REDIS_URL`` and ``CHANNEL_LAYERS``."""

    hidden_settings = re.compile(
        f"{SafeExceptionReporterFilter.hidden_settings.pattern}|REDIS_URL|CHANNEL_LAYERS", flags=re.I
    )
