"""PicoBot settings: every knob is a ``PICOBOT_*`` environment variable with an embedded default.

The embedded defaults run on one machine with zero setup (DESIGN §2): a SQLite file in WAL mode
with a busy timeout and IMMEDIATE transactions, and an in-process channel layer
(``delivery.local_layer.LocalChannelLayer``, Channels' in-memory layer made cheaper). Setting
``PICOBOT_DATABASE_URL`` (PostgreSQL) and ``PICOBOT_REDIS_URL`` switches to the scale-out mode;
the code path is the same. The variables are typed and checked in ``picobot_site/config.py``
(``settings.PICOBOT``); the README's configuration table is generated from it.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

import dj_database_url

from picobot_site import headers
from picobot_site.config import ConfigError, load_settings
from picobot_site.config_rules import one_line
from picobot_site.metrics import multiprocess as metrics_multiprocess

BASE_DIR = Path(__file__).resolve().parent.parent


def _stop(message: str) -> NoReturn:
    """End start-up with one line (serve, runagent, every command, plain daphne): no traceback."""
    raise SystemExit(f"PicoBot configuration error: {one_line(message)}")


try:
    PICOBOT = load_settings()
except ConfigError as exc:
    _stop(str(exc))

DATA_DIR = PICOBOT.data_dir

# Before anything imports prometheus_client: it picks single- or multiprocess values on import.
try:
    metrics_multiprocess.configure(PICOBOT.metrics_dir)
except metrics_multiprocess.MetricsDirError as exc:
    _stop(str(exc))


def _data_dir_ready() -> None:
    """The data directory exists and this user may write in it (the SQLite file, the secret key)."""
    try:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        (DATA_DIR / "staticfiles").mkdir(exist_ok=True)  # STATIC_ROOT: WhiteNoise wants it to exist
    except OSError as exc:
        _stop(f"PICOBOT_DATA_DIR={DATA_DIR}: cannot create it ({exc.strerror or exc})")
    if not os.access(DATA_DIR, os.W_OK | os.X_OK):
        _stop(f"PICOBOT_DATA_DIR={DATA_DIR}: not writable by this user")


def _secret_key() -> str:
    """The configured secret, else one generated once and kept in the data directory."""
    configured = PICOBOT.secret_key.get_secret_value()
    if configured:
        return configured
    path = DATA_DIR / "secret_key"
    try:
        if not path.exists():
            path.write_text(secrets.token_urlsafe(50))
            path.chmod(0o600)
        return path.read_text().strip()
    except OSError as exc:
        _stop(f"PICOBOT_DATA_DIR={DATA_DIR}: cannot keep the generated secret key ({exc.strerror or exc})")


def _database() -> dict:
    """The default database: ``PICOBOT_DATABASE_URL`` (PostgreSQL or SQLite), else the SQLite file
    in the data directory (a path, not a URL: ``#`` or ``%`` in it stay characters)."""
    url = PICOBOT.database_url.get_secret_value()
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(DATA_DIR / "picobot.sqlite3"),
            "CONN_MAX_AGE": 0,
        }
    example = "e.g. postgres://user:password@host:5432/picobot or sqlite:////path/to/file.sqlite3"
    try:
        database = dj_database_url.parse(url, conn_max_age=0)
    except ValueError as exc:  # the URL is not echoed: it may hold a password
        reason = "unknown scheme" if isinstance(exc, dj_database_url.UnknownSchemeError) else "malformed"
        _stop(f"PICOBOT_DATABASE_URL: not a database URL ({reason}; {example})")
    if database["ENGINE"] not in (_SQLITE, _POSTGRES):
        _stop(f"PICOBOT_DATABASE_URL: PicoBot runs on PostgreSQL or SQLite ({example})")
    if database.get("NAME") in (None, "", ":memory:"):  # in memory, each storage thread had its own
        _stop(f"PICOBOT_DATABASE_URL: names no database ({example})")
    return database


_SQLITE, _POSTGRES = "django.db.backends.sqlite3", "django.db.backends.postgresql"
_data_dir_ready()
SECRET_KEY = _secret_key()
DEBUG = PICOBOT.debug
ALLOWED_HOSTS = PICOBOT.allowed_hosts
CSRF_TRUSTED_ORIGINS = PICOBOT.csrf_trusted_origins

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
    "axes",  # login throttling (README "Authentication")
    "ninja",  # its bundled Swagger UI for /api/docs (no CDN)
    "delivery",
    "conversations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy on every answer, static files and API errors included (issue 16).
    "picobot_site.headers.PicoBotCSPMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",  # above WhiteNoise: static files too
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
    # Last: turns a login axes refused into our lockout page (429, conversations.auth.lockout).
    "axes.middleware.AxesMiddleware",
]

# --- security headers (issue 16; picobot_site/headers.py) -------------------------------------------
CONTENT_SECURITY_POLICY = headers.CONTENT_SECURITY_POLICY
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Sent only on requests Django sees as HTTPS; 0 sends none (README "Security").
SECURE_HSTS_SECONDS = PICOBOT.hsts_seconds
SECURE_HSTS_INCLUDE_SUBDOMAINS = False
SECURE_HSTS_PRELOAD = False

ROOT_URLCONF = "picobot_site.urls"
DEFAULT_EXCEPTION_REPORTER_FILTER = "picobot_site.reporting.PicoBotReporterFilter"
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
DATABASES = {"default": _database()}
if DATABASES["default"]["ENGINE"] == _SQLITE:
    DATABASES["default"]["OPTIONS"] = {
        # WAL lets readers run beside the single writer; IMMEDIATE takes the write lock at BEGIN so
        # two writers queue on the busy timeout instead of failing with "database is locked".
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": PICOBOT.sqlite_busy_timeout,
    }
    # A file (not :memory:) so the agent's storage threads share it; per process so that two
    # test runs on one checkout do not collide.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test_picobot_{os.getpid()}.sqlite3")}
else:
    DATABASES["default"].setdefault("OPTIONS", {})
    if PICOBOT.database_pool:
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": 2,
            "max_size": PICOBOT.database_pool_size,
        }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- channel layer (DESIGN §2) --------------------------------------------------------------------
REDIS_URL = PICOBOT.redis_url.get_secret_value()
CHANNEL_LAYER_CAPACITY = PICOBOT.channel_capacity
# Layers drop group members after group_expiry (so dead processes fall out); live members re-join
# every PICOBOT.group_refresh_seconds to stay in.
GROUP_EXPIRY_SECONDS = PICOBOT.group_expiry_seconds
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels_redis with two round trips per group_send and one per waiting message,
            # outliving Redis restarts and outages (sockets stay open, memberships re-joined).
            "BACKEND": "delivery.redis_outages.OutageTolerantRedisChannelLayer",
            "CONFIG": {
                # redis-py caps a pool at 100 and errors instead of waiting (DESIGN §2).
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "max_connections": PICOBOT.redis_max_connections,
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
            "CONFIG": {
                "capacity": CHANNEL_LAYER_CAPACITY,
                "expiry": 60,
                "group_expiry": GROUP_EXPIRY_SECONDS,
            },
        }
    }

# --- auth, i18n, static ---------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
AUTHENTICATION_BACKENDS = [
    # First: a locked-out login is refused before any password is hashed or token looked up.
    "axes.backends.AxesStandaloneBackend",
    # Then: an address with too many failed sign-ins (any account, or API tokens) is refused too.
    "conversations.auth.backends.AddressThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
    # The WebUI login also accepts an API token as the password (users made by createtoken).
    "conversations.auth.backends.ApiTokenBackend",
]
# Login throttling (django-axes, issue 16): PICOBOT_LOGIN_* in README "Authentication".
AXES_FAILURE_LIMIT = PICOBOT.login_failure_limit
AXES_COOLOFF_TIME = timedelta(seconds=PICOBOT.login_lockout_seconds)
AXES_LOCKOUT_PARAMETERS = (
    ["username"] if PICOBOT.login_lockout_by == "account" else [["username", "ip_address"]]
)
AXES_RESET_ON_SUCCESS = True
# W006 warns that a lock without the address is dodged by rotating user agents or cookies: ours
# counts every try on the account whatever they send (and PICOBOT_LOGIN_LOCKOUT_BY adds it).
SILENCED_SYSTEM_CHECKS = ["axes.W006"]
AXES_DISABLE_ACCESS_LOG = True  # no row per successful login (nothing would ever delete them)
AXES_LOCKOUT_CALLABLE = "conversations.auth.lockout.lockout_response"
# A login refused for its address (AddressThrottleBackend) was never checked: not an account failure.
AXES_WHITELIST_CALLABLE = "conversations.auth.backends.refused_by_address"
AXES_VERBOSE = False
# Session and CSRF cookies: HttpOnly session, SameSite=Lax, Secure over HTTPS. The CSRF cookie
# stays readable by the WebUI's script (it sends it back as X-CSRFToken).
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = PICOBOT.secure_cookies
if PICOBOT.trust_forwarded_proto:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"
LANGUAGE_CODE = "en-us"
TIME_ZONE = PICOBOT.time_zone
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"  # WhiteNoise serves from the finders; an empty root keeps it quiet
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        # PICOBOT_LOG_FORMAT=json: one redacted JSON object a line (picobot_site/log_format.py).
        "json": {"()": "picobot_site.log_format.JsonLogFormatter"},
    },
    # Every record gets the dialog_id and turn_id of the turn it was logged in (issue 17).
    "filters": {"turn_scope": {"()": "picobot_site.log_format.TurnScopeFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if PICOBOT.log_format == "json" else "plain",
            "filters": ["turn_scope"],
        }
    },
    "root": {"handlers": ["console"], "level": PICOBOT.log_level},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "axes": {"level": "WARNING"},  # a line per login otherwise; lockouts stay
    },
}
