"""PicoBot in the Django admin: dialogs and their history, messages, the inbox, API tokens, memory
items, plans, received Feishu messages, usage rows and background tasks (DESIGN §3 data model, §8 "secrets never in admin list pages", §9 the admin is
staff-only — Django's admin site already refuses non-staff users).

Importing this package registers every model admin (Django's autodiscovery imports
``conversations.admin``). The rules they keep — lean change lists, read-only rows, safe lookups,
storable JSON, writes through storage — are in ``README.md`` here.
"""

from conversations.admin import (
    dialogs,
    feishu,
    mcp,
    memory,
    messages,
    plans,
    schedules,
    tasks,
    tokens,
    usage,
)

__all__ = ["dialogs", "feishu", "mcp", "memory", "messages", "plans", "schedules", "tasks", "tokens", "usage"]
