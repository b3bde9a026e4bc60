"""PicoBot settings: every knob is a ``PICOBOT_*`` environment variable with an embedded default.

The embedded defaults run on one machine with zero setup (DESIGN §2): a SQLite file in WAL mode
with a busy timeout and IMMEDIATE transactions, and an in-process channel layer
(``delivery.local_layer.LocalChannelLayer``, Channels' in-memory layer made cheaper). Setting
``PICOBOT_DATABASE_URL`` (PostgreSQL) and ``PICOBOT_REDIS_URL`` switches to the scale-out mode;
the code path is the same. DESIGN §8 lists the variables; the README documents them.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    """Return ``$name`` stripped, or ``default`` when unset or blank."""
    value = os.environ.get(name, "").strip()
    return value or default


def env_int(name: str, default: int) -> int:
    """Return ``$name`` as an int; raises ValueError naming the variable when it is not one."""
    raw = env_str(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc


def env_float(name: str, default: float) -> float:
    """Return ``$name`` as a float; raises ValueError naming the variable when it is not one."""
    raw = env_str(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number, got {raw!r}") from exc


def env_bool(name: str, default: bool) -> bool:
    """Return ``$name`` as a bool (1/true/yes/on vs 0/false/no/off)."""
    raw = env_str(name).lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    """Return ``$name`` split on commas (blank items dropped)."""
    raw = env_str(name)
    if not raw:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DATA_DIR = Path(env_str("PICOBOT_DATA_DIR", str(BASE_DIR / "var")))
DATA_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """The configured secret, else one generated once and kept in the data directory."""
    configured = env_str("PICOBOT_SECRET_KEY")
    if configured:
        return configured
    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("PICOBOT_DEBUG", False)
ALLOWED_HOSTS = env_list("PICOBOT_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("PICOBOT_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # its bundled Swagger UI for /api/docs (no CDN)
    "delivery",
    "conversations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # /api/: HEAD served as GET without a body; every error Django (not the API) makes — unrouted
    # paths and methods, CSRF, a bad Host header (CommonMiddleware) — answers JSON.
    "conversations.api.middleware.ApiHttpMiddleware",
    "django.middleware.common.CommonMiddleware",
    # %00 in a path, query or admin form: one 400 on every database (PostgreSQL cannot hold NUL).
    "picobot_site.middleware.NulRefusingMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A WebUI session logged in with an API token ends when that token is revoked.
    "conversations.auth.middleware.RevokedTokenSessionMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "picobot_site.urls"
ASGI_APPLICATION = "picobot_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database (DESIGN §2) -------------------------------------------------------------------------
SQLITE_BUSY_TIMEOUT = env_float("PICOBOT_SQLITE_BUSY_TIMEOUT", 20.0)
DATABASES = {
    "default": dj_database_url.parse(
        env_str("PICOBOT_DATABASE_URL", f"sqlite:///{DATA_DIR / 'picobot.sqlite3'}"),
        conn_max_age=0,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # WAL lets readers run beside the single writer; IMMEDIATE takes the write lock at BEGIN so
        # two writers queue on the busy timeout instead of failing with "database is locked".
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": SQLITE_BUSY_TIMEOUT,
    }
    # A file (not :memory:) so the agent's storage threads share it; per process so that two
    # test runs on one checkout do not collide.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test_picobot_{os.getpid()}.sqlite3")}
else:
    DATABASES["default"].setdefault("OPTIONS", {})
    if env_bool("PICOBOT_DATABASE_POOL", False):
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": 2,
            "max_size": env_int("PICOBOT_DATABASE_POOL_SIZE", 10),
        }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- channel layer (DESIGN §2) --------------------------------------------------------------------
REDIS_URL = env_str("PICOBOT_REDIS_URL")
CHANNEL_LAYER_CAPACITY = env_int("PICOBOT_CHANNEL_CAPACITY", 1000)
# Layers drop group members after group_expiry (so dead processes fall out); live members re-join
# every GROUP_REFRESH_SECONDS (PICOBOT["GROUP_REFRESH_SECONDS"]) to stay in.
GROUP_EXPIRY_SECONDS = env_int("PICOBOT_GROUP_EXPIRY_SECONDS", 86400)
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels_redis with two round trips per group_send and one per waiting message.
            "BACKEND": "delivery.redis_layer.RoundTripRedisChannelLayer",
            "CONFIG": {
                # redis-py caps a pool at 100 and errors instead of waiting (DESIGN §2).
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "max_connections": env_int("PICOBOT_REDIS_MAX_CONNECTIONS", 500),
                        # redis-py 8 gives every connection a 5 s read timeout by default, and the
                        # layer's blocking receive waits up to 5 s: idle sockets would die with
                        # "Timeout reading". Reads block; connecting stays bounded.
                        "socket_timeout": None,
                        "socket_connect_timeout": 5,
                    }
                ],
                "capacity": CHANNEL_LAYER_CAPACITY,
                "expiry": 60,
                "group_expiry": GROUP_EXPIRY_SECONDS,
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            # Channels' in-memory layer without its per-call sweeps and per-receiver deepcopy.
            "BACKEND": "delivery.local_layer.LocalChannelLayer",
            "CONFIG": {"capacity": CHANNEL_LAYER_CAPACITY, "expiry": 60, "group_expiry": GROUP_EXPIRY_SECONDS},
        }
    }

# --- auth, i18n, static ---------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    # The WebUI login also accepts an API token as the password (users made by createtoken).
    "conversations.auth.backends.ApiTokenBackend",
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("PICOBOT_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise serves from the finders; an empty root keeps it quiet
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- PicoBot itself (DESIGN §8) -------------------------------------------------------------------
PICOBOT = {
    # LLM provider: openai | anthropic | replay. Unset → replay (offline, labelled in the UI).
    "LLM_PROVIDER": env_str("PICOBOT_LLM_PROVIDER").lower(),
    "LLM_BASE_URL": env_str("PICOBOT_LLM_BASE_URL"),
    "LLM_API_KEY": env_str("PICOBOT_LLM_API_KEY"),
    "LLM_MODEL": env_str("PICOBOT_LLM_MODEL"),
    "LLM_MAX_TOKENS": env_int("PICOBOT_LLM_MAX_TOKENS", 4096),
    # Inline <think>/<thought>/<reasoning> spans become reasoning (seed 003 §7.2, DESIGN §6).
    "LLM_THINK_TAGS": env_bool("PICOBOT_LLM_THINK_TAGS", True),
    "LLM_IMPLICIT_THINK_START": env_bool("PICOBOT_LLM_IMPLICIT_THINK_START", False),
    # Native Anthropic reasoning arrives as thinking blocks: inline tags stay text unless enabled.
    "LLM_ANTHROPIC_THINK_TAGS": env_bool("PICOBOT_LLM_ANTHROPIC_THINK_TAGS", False),
    "LLM_CONNECT_TIMEOUT": env_float("PICOBOT_LLM_CONNECT_TIMEOUT", 10.0),
    "LLM_FIRST_BYTE_TIMEOUT": env_float("PICOBOT_LLM_FIRST_BYTE_TIMEOUT", 60.0),
    "LLM_IDLE_TIMEOUT": env_float("PICOBOT_LLM_IDLE_TIMEOUT", 60.0),
    "LLM_MAX_RETRIES": env_int("PICOBOT_LLM_MAX_RETRIES", 2),
    # Upstream connections per process (one per streaming turn); a turn waits for a free one.
    "LLM_MAX_CONNECTIONS": env_int("PICOBOT_LLM_MAX_CONNECTIONS", 1000),
    "REPLAY_DIR": env_str("PICOBOT_REPLAY_DIR", str(BASE_DIR / "providers" / "transcripts")),
    # Seconds between replayed SSE events, so the offline provider streams visibly.
    "REPLAY_EVENT_DELAY": env_float("PICOBOT_REPLAY_EVENT_DELAY", 0.03),
    "LLM_THINKING_BUDGET": env_int("PICOBOT_LLM_THINKING_BUDGET", 0),
    # OpenAI-compatible: send streamed reasoning_content back on tool-call turns (DeepSeek thinking
    # mode requires it); off for servers that reject the field.
    "LLM_REPLAY_REASONING": env_bool("PICOBOT_LLM_REPLAY_REASONING", True),
    # Dotted paths of functions called with the provider's ProviderHooks (providers/hooks.py).
    "LLM_HOOKS": env_list("PICOBOT_LLM_HOOKS", []),
    "SYSTEM_PROMPT": env_str(
        "PICOBOT_SYSTEM_PROMPT",
        "You are PicoBot, a helpful assistant. Use tools when they help; answer concisely.",
    ),
    # Agent loop bounds.
    "MAX_ITERATIONS": env_int("PICOBOT_MAX_ITERATIONS", 8),
    # Characters of answer text + reasoning one turn may stream (all iterations); past it the
    # answer is cut off and kept as interrupted, so no frame outgrows the WebSocket's limit.
    "MAX_TURN_OUTPUT_CHARS": env_int("PICOBOT_MAX_TURN_OUTPUT_CHARS", 1_000_000),
    "TOOL_TIMEOUT": env_float("PICOBOT_TOOL_TIMEOUT", 30.0),
    "TURN_TIMEOUT": env_float("PICOBOT_TURN_TIMEOUT", 600.0),
    # Inbox (seed 000 §6: per-session queue capacity 32).
    "INBOX_CAPACITY": env_int("PICOBOT_INBOX_CAPACITY", 32),
    # Dialog lease (DESIGN §2).
    "LEASE_SECONDS": env_float("PICOBOT_LEASE_SECONDS", 15.0),
    "LEASE_RENEW_SECONDS": env_float("PICOBOT_LEASE_RENEW_SECONDS", 5.0),
    "INBOX_SCAN_SECONDS": env_float("PICOBOT_INBOX_SCAN_SECONDS", 5.0),
    "GROUP_REFRESH_SECONDS": env_float("PICOBOT_GROUP_REFRESH_SECONDS", 3600.0),
    # Seconds a turn a connection watches may stay silent before the connection looks it up in
    # storage, to send an end frame the channel layer dropped (PROTOCOL §1 "Convergence").
    "RECONCILE_QUIET_SECONDS": env_float("PICOBOT_RECONCILE_QUIET_SECONDS", 5.0),
    # A WebSocket whose client leaves more than this many bytes of output unread is closed (4408):
    # twice the largest frame, so a client that reads, however slowly, is not cut off by two answers.
    "WS_MAX_UNSENT_BYTES": env_int("PICOBOT_WS_MAX_UNSENT_BYTES", 16 * 1024 * 1024),
    # Live snapshot throttle for WebSocket sinks, ms (seed 003 §9.1: ≈30 FPS).
    "WS_SNAPSHOT_INTERVAL_MS": env_int("PICOBOT_WS_SNAPSHOT_INTERVAL_MS", 33),
    # Storage write retry delays, ms (seed 004 §4.4).
    "STORAGE_RETRY_DELAYS_MS": [int(x) for x in env_list("PICOBOT_STORAGE_RETRY_DELAYS_MS", ["100", "200", "300"])],
    # Threads for the agent's own DB calls (SQLite always uses one: it has one writer).
    "STORAGE_THREADS": env_int("PICOBOT_STORAGE_THREADS", 4),
    # How long a thread may hold the GIL while another waits, ms (Python's default: 5). The event
    # loop gives the GIL up at every socket call; with a storage thread busy it then waited up to
    # 5 ms each time, which was most of the added latency under load (bench_load, issue 12).
    # 0 or less keeps Python's default.
    "SWITCH_INTERVAL_MS": env_float("PICOBOT_SWITCH_INTERVAL_MS", 1.0),
    # Sessions (seed 004 §9, DESIGN §6): a chat's active dialog idle longer than the TTL is replaced
    # by a new one on the next message, and runtime sessions idle that long leave memory. 0 = never.
    "SESSION_TTL_HOURS": env_float("PICOBOT_SESSION_TTL_HOURS", 24.0),
    "SESSION_CLEANUP_MINUTES": env_float("PICOBOT_SESSION_CLEANUP_MINUTES", 60.0),
    # Titles (seed 004 §5.4): generated after N user messages while the title is the default
    # (0 = never), and optionally for a dialog's first message.
    "AUTO_TITLE_AFTER": env_int("PICOBOT_AUTO_TITLE_AFTER", 10),
    "AUTO_TITLE_ON_FIRST_MESSAGE": env_bool("PICOBOT_AUTO_TITLE_ON_FIRST_MESSAGE", False),
    "TITLE_TIMEOUT": env_float("PICOBOT_TITLE_TIMEOUT", 30.0),
    # Compaction (seed 004 §7, seed 002 Task 6): the newest rows kept verbatim, the time bound of
    # one summary call (manual /compact and automatic).
    "COMPACT_KEEP_MESSAGES": env_int("PICOBOT_COMPACT_KEEP_MESSAGES", 20),
    "COMPACT_TIMEOUT": env_float("PICOBOT_COMPACT_TIMEOUT", 120.0),
    # Automatic compaction (seed 002 §6d): the model's context window in tokens, and the share of
    # it a turn's estimated request may use before it is compacted first.
    "LLM_CONTEXT_WINDOW": env_int("PICOBOT_LLM_CONTEXT_WINDOW", 128000),
    "COMPACT_THRESHOLD": env_float("PICOBOT_COMPACT_THRESHOLD", 0.8),
    # Dotted module paths whose ``register(registry)`` adds tools to the built-in ones.
    "TOOL_MODULES": env_list("PICOBOT_TOOL_MODULES", []),
    # Tools (issue 6, DESIGN §6): a result longer than this many characters is cut, with a marker.
    "TOOL_RESULT_MAX_CHARS": env_int("PICOBOT_TOOL_RESULT_MAX_CHARS", 16000),
    # Tool calls of one turn that run at the same time; further calls of a response wait for a slot.
    "MAX_TOOL_CALLS": env_int("PICOBOT_MAX_TOOL_CALLS", 16),
    "MAX_TOOL_CALLS_PER_RESPONSE": env_int("PICOBOT_MAX_TOOL_CALLS_PER_RESPONSE", 64),
    # UTF-8 bytes of one tool call's argument text; a larger one gets an error result, unparsed.
    "MAX_TOOL_ARGUMENT_BYTES": env_int("PICOBOT_MAX_TOOL_ARGUMENT_BYTES", 256 * 1024),
    # http_fetch: body bytes read, seconds per fetch (redirects included), and whether loopback,
    # private and link-local addresses may be fetched (never the cloud metadata address).
    "HTTP_FETCH_MAX_BYTES": env_int("PICOBOT_HTTP_FETCH_MAX_BYTES", 1024 * 1024),
    "HTTP_FETCH_TIMEOUT": env_float("PICOBOT_HTTP_FETCH_TIMEOUT", 15.0),
    "HTTP_FETCH_ALLOW_PRIVATE": env_bool("PICOBOT_HTTP_FETCH_ALLOW_PRIVATE", False),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("PICOBOT_LOG_LEVEL", "INFO")},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
    },
}
