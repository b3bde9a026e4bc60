"""One ``manage.py doctor`` result line (:class:`Check`) and the URL form it may print."""

from __future__ import annotations

from dataclasses import dataclass

from providers.presets import display_url

OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclass(frozen=True)
class Check:
    """One result line: ``status name: detail`` and, unless OK, how to fix it."""

    status: str
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4} {self.name}: {self.detail}"
        return f"{text}\n     fix: {self.fix}" if self.fix else text


def safe_url(url: str) -> str:
    """``url`` without userinfo (passwords), query or fragment (``presets.display_url``)."""
    return display_url(url)
