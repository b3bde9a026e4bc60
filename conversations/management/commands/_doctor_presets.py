"""``manage.py doctor``'s model preset check (issue 17): the ``PICOBOT_CONFIG`` file loads, each
preset's key variable is set, and whether the ``PICOBOT_LLM_*`` provider settings are in use.

Names only: a key's value is never printed. The 1-token request of the ``LLM provider`` check
goes to the default preset's provider.
"""

from __future__ import annotations

import os

from django.conf import settings

from conversations.management.commands._doctor_check import FAIL, OK, WARN, Check

# The settings a [models] table replaces (timeouts, retries, hooks and think tags still apply).
PROVIDER_SETTINGS = (
    "PICOBOT_LLM_PROVIDER",
    "PICOBOT_LLM_BASE_URL",
    "PICOBOT_LLM_API_KEY",
    "PICOBOT_LLM_MODEL",
)


def check_presets() -> list[Check]:
    """OK/WARN/FAIL lines: the file (or its ValueError), the default, each preset's key."""
    from conversations.runtime.provider import read_catalog

    source = settings.PICOBOT.config
    try:
        catalog = read_catalog()  # the file as it is now
    except ValueError as exc:
        return [Check(FAIL, "model presets", str(exc), "correct PICOBOT_CONFIG (README, Model presets)")]
    if not catalog.from_file:
        where = f"PICOBOT_CONFIG={source} has no [models] table" if source else "no PICOBOT_CONFIG"
        return [Check(OK, "model presets", f"{where}: the PICOBOT_LLM_* settings are the preset 'default'")]
    out = [
        Check(
            OK,
            "model presets",
            f"{len(catalog.presets)} from PICOBOT_CONFIG={source}: {', '.join(catalog.names())}; "
            f"default {catalog.default}",
        )
    ]
    ignored = [name for name in PROVIDER_SETTINGS if os.environ.get(name, "").strip()]
    out.append(
        Check(
            WARN if ignored else OK,
            "model presets",
            "with a [models] table the PICOBOT_LLM_* provider settings are not used"
            + (f" (set but ignored: {', '.join(ignored)})" if ignored else ""),
            "unset them, or describe that provider as a [models.NAME] table" if ignored else "",
        )
    )
    for preset in catalog.presets.values():
        if preset.key_missing:
            status = FAIL if preset.name == catalog.default else WARN
            out.append(
                Check(
                    status,
                    f"preset {preset.name}",
                    f"{preset.label}: {preset.key_problem} (users cannot choose it"
                    + (", and it is the default)" if status == FAIL else ")"),
                    f"set {preset.api_key_env} in the server's environment"
                    if preset.api_key_env
                    else f"add api_key_env to [models.{preset.name}] (or a base_url of a server that needs none)",
                )
            )
        elif not preset.api_key_env:
            out.append(Check(OK, f"preset {preset.name}", f"{preset.label}: no key variable (api_key_env)"))
        else:
            out.append(Check(OK, f"preset {preset.name}", f"{preset.label}: ${preset.api_key_env} is set"))
        keyless = [name for name in preset.fallbacks if catalog.presets[name].key_missing]
        if keyless:  # such a fallback is left out of the chain when a turn runs
            out.append(
                Check(
                    WARN,
                    f"preset {preset.name} fallbacks",
                    f"{', '.join(keyless)} cannot be used (no key): {preset.name} falls back to "
                    + (", ".join(n for n in preset.fallbacks if n not in keyless) or "nothing"),
                    "set their key variables, or list other fallbacks",
                )
            )
    return out
