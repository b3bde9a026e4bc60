"""``manage.py doctor``'s Feishu line: the app's credentials work and the bot is who it should be."""

from __future__ import annotations

import asyncio

from django.conf import settings

from conversations.management.commands._doctor_check import FAIL, OK, WARN, Check, safe_url

_HINTS = {
    10003: "check PICOBOT_FEISHU_APP_ID (the app's App ID, cli_…)",
    10014: "check PICOBOT_FEISHU_APP_SECRET (the app's App Secret)",
    99991672: "grant the app the scopes README 'Feishu' lists, then publish a new version",
    99991663: "check PICOBOT_FEISHU_APP_ID and PICOBOT_FEISHU_APP_SECRET",
}


def check_feishu(timeout: float) -> list[Check]:
    """Off, or: a tenant token is issued and the bot info API answers (one call each)."""
    picobot = settings.PICOBOT
    if not picobot.feishu_mode:
        return [Check(OK, "feishu", "off (PICOBOT_FEISHU_MODE unset)")]
    from conversations.feishu.client import FeishuClient
    from delivery.platforms.feishu.api import FeishuApiError, FeishuError

    base = picobot.feishu_api_base.rstrip("/")

    async def probe() -> dict:
        client = FeishuClient(
            base, picobot.feishu_app_id, picobot.feishu_app_secret.get_secret_value(), timeout=timeout
        )
        try:
            return await client.bot_info()
        finally:
            await client.aclose()

    try:
        bot = asyncio.run(asyncio.wait_for(probe(), timeout * 2))
    except FeishuApiError as exc:
        hint = _HINTS.get(exc.code, "see the code in the Feishu error code table (log id above)")
        detail = f"{safe_url(base)} refused the app: code {exc.code}" + (
            f" (log id {exc.log_id})" if exc.log_id else ""
        )
        return [Check(FAIL, "feishu", detail, hint)]
    except (FeishuError, TimeoutError, OSError) as exc:
        return [
            Check(
                FAIL,
                "feishu",
                f"{safe_url(base)} unreachable: {type(exc).__name__}",
                "check the network and PICOBOT_FEISHU_API_BASE",
            )
        ]
    where = (
        "events at POST /feishu/events/ on this server (set it as the Request URL)"
        if picobot.feishu_mode == "webhook"
        else "events over the long connection, started by serve and runagent"
    )
    name = bot.get("app_name") or "?"
    summary = f"{picobot.feishu_mode}: bot “{name}” ({bot.get('open_id') or 'no open_id'}); {where}"
    local = {"localhost", "127.0.0.1", "[::1]", "::1"}
    if picobot.feishu_mode == "webhook" and set(picobot.allowed_hosts) <= local:
        return [
            Check(
                WARN,
                "feishu",
                f"{summary}, but PICOBOT_ALLOWED_HOSTS names this machine only: Feishu's requests get 400",
                "add the host name of the Request URL to PICOBOT_ALLOWED_HOSTS",
            )
        ]
    return [Check(OK, "feishu", summary)]
