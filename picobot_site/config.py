"""PicoBot's typed settings: every ``PICOBOT_*`` environment variable as one validated object.

:class:`PicoBotSettings` is built once at start-up from the environment (``picobot_site.settings``
holds it as ``settings.PICOBOT``); every module reads its attributes. Values are typed and bounded,
``nan``/``inf`` are refused and a blank variable means its default. A bad value raises
:class:`ConfigError` whose one-line message names the variable, e.g.
``PICOBOT_INBOX_CAPACITY=-1: input should be greater than or equal to 1``.

The README's configuration table is generated from the fields (``picobot_site.config_table``); a
test keeps the two equal. Pure: imports pydantic-settings, no Django.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import AliasGenerator, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from picobot_site import config_rules as rules
from picobot_site.config_rules import CommaList, ConfigError, env_name, setting
from providers.config import ProviderConfig

__all__ = ["ConfigError", "PicoBotSettings", "env_name", "load_settings"]

BASE_DIR = Path(__file__).resolve().parent.parent


class PicoBotSettings(BaseSettings):
    """The deployment's configuration (DESIGN §8). Field ``x_y`` is variable ``PICOBOT_X_Y``."""

    model_config = SettingsConfigDict(
        # Read as PICOBOT_INBOX_CAPACITY exactly (never `inbox_capacity`); replace() maps names.
        alias_generator=AliasGenerator(validation_alias=env_name),
        case_sensitive=True,
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        allow_inf_nan=False,
        validate_default=True,
    )

    # --- the LLM provider ---------------------------------------------------------------------
    llm_provider: Literal["openai", "anthropic", "replay"] = setting(
        "replay",
        "`openai` (any OpenAI-compatible server), `anthropic` (Messages API; its base URL has no "
        "`/v1`: `https://api.anthropic.com`), `replay` (offline)",
        shown="*(unset → replay)*",
    )
    llm_base_url: str = setting(
        "",
        "base URL **including** the version path, as in the official SDK; requests go to "
        "`{base}/chat/completions`",
        shown="`https://api.openai.com/v1`",
        repr=False,  # may carry credentials (userinfo, ?api-key=): not on error pages
    )
    llm_api_key: SecretStr = setting(
        SecretStr(""),
        "sent as `Authorization: Bearer …`; error texts and logs have it replaced by `[redacted]` "
        "wherever it appears, unless it is a placeholder a local server accepts (`ollama`, `EMPTY`, `none`, "
        "`test`…) or too short to be a secret (under 12 characters, or under 8 with a digit) — such a word "
        "would otherwise blank ordinary words in messages",
        shown="",
    )
    llm_model: str = setting("", "model name (required for `openai` and `anthropic`)", max_length=200)
    llm_max_tokens: int = setting(
        4096, "output budget per request (`0`: none sent; Anthropic, which needs one, gets 4096)", ge=0
    )
    llm_think_tags: bool = setting(
        True, "OpenAI-compatible: turn inline `<think>`/`<thought>`/`<reasoning>` spans into reasoning"
    )
    llm_anthropic_think_tags: bool = setting(
        False,
        "the same for the native Anthropic provider (its reasoning arrives as thinking blocks, so "
        "inline tags are text by default)",
    )
    llm_implicit_think_start: bool = setting(
        False, "the model's output starts inside reasoning; the first `</think>` ends it (R1-style templates)"
    )
    llm_connect_timeout: float = setting(10.0, "provider connect timeout", unit="s", gt=0)
    llm_first_byte_timeout: float = setting(60.0, "longest wait for the first stream chunk", unit="s", gt=0)
    llm_idle_timeout: float = setting(60.0, "longest gap between stream chunks", unit="s", gt=0)
    llm_max_retries: int = setting(2, "retries of a failed request, only before any content arrived", ge=0)
    llm_max_connections: int = setting(
        1000,
        "upstream connections per process (one per streaming turn, reused); a turn that finds none free "
        "waits for one (bounded by `PICOBOT_TURN_TIMEOUT`, not the connect timeout), it never fails for it",
        ge=1,
    )
    llm_thinking_budget: int = setting(
        0,
        "Anthropic: extended-thinking budget in tokens (0 = off; else ≥ 1024 and below "
        "`PICOBOT_LLM_MAX_TOKENS`); signed thinking is replayed to the same provider only",
        ge=0,
    )
    llm_replay_reasoning: bool = setting(
        True,
        "OpenAI-compatible: send a tool-call turn's streamed `reasoning_content` back in later requests "
        "(DeepSeek thinking mode requires it); `0` for servers that reject the field",
    )
    llm_hooks: CommaList = setting(
        [],
        "comma-separated dotted paths of functions `install(hooks)` that register pre-request / "
        "post-request / on-error hooks (`providers/hooks.py`); a pre-request hook can block a call",
    )
    llm_context_window: int = setting(
        128000,
        "the model's context window, in tokens; turn inputs are estimated against it (≈3.5 ASCII "
        "characters or 1 CJK character per token, on the safe side)",
        ge=1,
    )
    replay_dir: Path = setting(
        BASE_DIR / "providers" / "transcripts",
        "the offline replay provider's recorded transcripts",
        shown="`providers/transcripts`",
    )
    replay_event_delay: float = setting(
        0.03, "pause between the offline replay's stream events (so it streams visibly)", unit="s", ge=0
    )

    config: Path | None = setting(
        None,
        'a TOML file of model presets (`[models.NAME]` tables, `default_model`; README "Model presets"); '
        "with a `[models]` table the `PICOBOT_LLM_*` provider settings above only give timeouts, retries and hooks",
        shown="*(unset → the `PICOBOT_LLM_*` settings are the preset `default`)*",
    )

    # --- the agent loop -----------------------------------------------------------------------
    system_prompt: str = setting(
        "You are PicoBot, a helpful assistant. Use tools when they help; answer concisely.",
        "the system prompt (built per request, never stored)",
        shown="a short default",
    )
    max_iterations: int = setting(8, "model requests per turn (tool loop bound)", ge=1)
    turn_timeout: float = setting(600.0, "whole-turn deadline", unit="s", gt=0)
    max_turn_output_chars: int = setting(
        1_000_000,
        "characters of answer text and reasoning one turn may stream, summed over all its model "
        "requests; past it the stream is closed, the answer text that fit is kept as an interrupted answer "
        '(reasoning alone is not kept) and the user reads "The answer and its reasoning were longer than N '
        'characters and were cut off" (a server that ignores `max_tokens` cannot make a frame too large for '
        "the WebSocket)",
        ge=1,
    )

    # --- tools --------------------------------------------------------------------------------
    tool_modules: CommaList = setting(
        [], "comma-separated dotted module paths whose `register(registry)` adds your own tools"
    )
    tool_timeout: float = setting(
        30.0,
        "per tool call (a tool may declare a shorter limit of its own, never a longer one; `current_time` "
        "has 5 s)",
        unit="s",
        gt=0,
    )
    mcp_connect_timeout: float = setting(
        30.0,
        "MCP tool servers (`[mcp_servers]` in `PICOBOT_CONFIG`, or the admin): bound of starting, "
        "initializing and listing a server, and of a liveness ping",
        unit="s",
        gt=0,
    )
    mcp_refresh_seconds: float = setting(
        30.0,
        "how often each agent worker reads the MCP servers again (the admin's rows; a changed one "
        "restarts); `0`: only at start",
        unit="s",
        ge=0,
    )
    tool_result_max_chars: int = setting(
        16000,
        "a tool result longer than this many characters is cut, with a marker saying how much was cut "
        "(`0` = no limit)",
        ge=0,
    )
    max_tool_calls: int = setting(
        16,
        "tool calls of one turn that run at the same time; the model's further calls in the same response "
        "wait for a free slot (their time limit starts then)",
        ge=1,
    )
    max_tool_calls_per_response: int = setting(
        64,
        "tool calls of one model response that run at all; further calls in that response are dropped (not "
        "run, stored, shown or sent back) and the last kept call's result tells the model how many were "
        "dropped (it may repeat them in its next response)",
        ge=1,
    )
    max_tool_argument_bytes: int = setting(
        256 * 1024,
        "UTF-8 bytes of one tool call's argument text; a larger call is not parsed: it gets the error "
        'result "arguments too large (N bytes; at most M)", its block shows `{"_truncated": "N bytes"}` and '
        "history keeps it with `{}` arguments",
        ge=1,
    )
    http_fetch_max_bytes: int = setting(
        1024 * 1024,
        "`http_fetch`: body bytes read at most (after gzip/deflate decoding); a call may ask for fewer",
        ge=1,
    )
    http_fetch_timeout: float = setting(
        15.0, "`http_fetch`: bound of one fetch, redirects included", unit="s", gt=0
    )
    http_fetch_allow_private: bool = setting(
        False,
        "`1` lets `http_fetch` reach loopback, private and link-local addresses (an intranet); the cloud "
        "metadata address, `0.0.0.0` and multicast stay refused",
    )

    # --- background tasks (issue 18; README "Background tasks") ----------------------------------
    task_max_seconds: float = setting(
        600.0,
        "a background task's time limit, and the most a `spawn_task` call may ask for; past it the task "
        "ends failed",
        unit="s",
        gt=0,
    )
    task_max_iterations: int = setting(
        12,
        "model requests a background task may make, and the most a `spawn_task` call may ask for; a task "
        "still calling tools after them ends failed",
        ge=1,
    )
    task_max_tokens: int = setting(
        200_000,
        "tokens (input + output, summed over its model requests) a background task may use, and the most "
        "a `spawn_task` call may ask for; past them it ends failed",
        ge=1,
    )
    task_max_running: int = setting(
        3,
        "background tasks one user may have running at once (over all their dialogs); `0` turns "
        "`spawn_task` off",
        ge=0,
    )
    task_result_max_chars: int = setting(
        8000,
        "characters of a background task's final answer that are kept and sent back to its dialog; the "
        "rest is cut with a marker",
        ge=100,
    )

    # --- dialogs, titles, compaction ----------------------------------------------------------
    inbox_capacity: int = setting(32, "queued messages per dialog before new ones are refused", ge=1)
    session_ttl_hours: float = setting(
        24.0,
        "a chat's active dialog idle longer than this is replaced by a new one on the next message; "
        "runtime sessions idle this long leave the worker's memory (`0` = never)",
        ge=0,
    )
    session_cleanup_minutes: float = setting(60.0, "how often the worker evicts idle runtime sessions", gt=0)
    auto_title_after: int = setting(
        10,
        "generate a title after this many user messages while the title is the default (`0` = never)",
        ge=0,
    )
    auto_title_on_first_message: bool = setting(False, "also title a dialog right after its first message")
    title_timeout: float = setting(
        30.0, "bound of one title generation (a failure is only logged)", unit="s", gt=0
    )
    compact_keep_messages: int = setting(
        20, "compaction (`/compact` and automatic): newest history rows kept verbatim at most", ge=0
    )
    compact_timeout: float = setting(120.0, "compaction: the time bound of one summary call", unit="s", gt=0)
    compact_threshold: float = setting(
        0.8,
        "share of the context window a turn's estimated request may use; past it old tool results are "
        "pruned from the request and, if that is not enough, older history is summarised automatically (the "
        "turn shows a `compacting` phase). Three failed automatic compactions in a row switch it off for the "
        "dialog until `/compact` or a new dialog",
        gt=0,
        le=1,
    )

    # --- storage ------------------------------------------------------------------------------
    data_dir: Path = setting(
        BASE_DIR / "var",
        "SQLite file, generated secret key (a relative path is relative to the current directory)",
        shown="`var/` in the install directory",
    )
    database_url: SecretStr = setting(
        SecretStr(""),
        "any dj-database-url URL, e.g. `postgres://user:password@host:5432/picobot`",
        shown="`sqlite:///` + `$PICOBOT_DATA_DIR/picobot.sqlite3`",
    )
    database_pool: bool = setting(
        False,
        "PostgreSQL: use Django's psycopg connection pool (each storage thread and the lease keeper keep "
        "one connection: leave room above `PICOBOT_STORAGE_THREADS` + 1)",
    )
    database_pool_size: int = setting(10, "PostgreSQL: the pool's size per process (at least 2)", ge=2)
    sqlite_busy_timeout: float = setting(20.0, "how long a SQLite writer waits for the lock", unit="s", gt=0)
    storage_threads: int = setting(
        4, "threads for the agent's DB calls on PostgreSQL (SQLite: always 1)", ge=1
    )
    storage_retry_delays_ms: Annotated[list[Annotated[int, Field(ge=0, le=60_000)]], NoDecode] = setting(
        [100, 200, 300], "retries of a failed DB write (delays in ms, comma-separated)"
    )
    switch_interval_ms: float = setting(
        1.0,
        "how long one thread of `serve`/`runagent` may hold Python's GIL while another waits (Python's "
        "default, 5 ms, made the event loop wait behind the storage thread under load); 0 keeps Python's "
        "default; plain `daphne` does not apply it. Rarely worth changing",
        ge=0,
    )

    # --- channel layer, workers, WebSockets ---------------------------------------------------
    redis_url: SecretStr = setting(
        SecretStr(""),
        "`redis://host:6379/0` for the channel layer (scale-out)",
        shown="*(unset → in-memory layer)*",
    )
    redis_max_connections: int = setting(500, "channel layer connection pool (Redis; at least 10)", ge=10)
    channel_capacity: int = setting(1000, "channel layer per-channel capacity", ge=1)
    group_expiry_seconds: int = setting(
        86400, "a channel layer group member that did not re-join for this long is dropped", unit="s", ge=1
    )
    group_refresh_seconds: float = setting(
        3600.0, "how often live processes re-join their channel layer groups", unit="s", gt=0
    )
    worker_id: str = setting(
        "",
        "a worker's identity in the lease rows (`serve` keeps it across restarts, so it resumes its own "
        "dialogs at once)",
        shown="`host:serve` / `host:pid`",
        max_length=200,
    )
    lease_seconds: float = setting(
        15.0,
        "dialog ownership across worker processes: a dead process's dialogs move to a live one within "
        "about 30 s (the lease, plus two renewal intervals in which nobody renewed it)",
        unit="s",
        gt=0,
    )
    lease_renew_seconds: float = setting(
        5.0,
        "how often a worker renews its leases; a busy or slow process keeps its dialogs (a thread of its "
        "own renews all its leases at once)",
        unit="s",
        gt=0,
    )
    turn_checkpoint_seconds: float = setting(
        2.0,
        "how often a running turn's shown answer and reasoning are saved, so a turn whose process dies "
        "keeps what it showed (as of its last save) in history, marked interrupted; one batched write "
        "per worker per period, only for turns that changed; `0` turns it off",
        unit="s",
        ge=0,
    )
    inbox_scan_seconds: float = setting(
        5.0, "how often a worker looks for queued input whose wake-up message was lost", unit="s", gt=0
    )
    schedule_poll_seconds: float = setting(
        10.0,
        "how often each agent worker looks for due scheduled prompts (see Scheduled prompts); `0` turns "
        "the scheduler off in this process",
        unit="s",
        ge=0,
    )
    schedule_grace_seconds: float = setting(
        120.0,
        "a scheduled prompt found due more than this long after its time counts as missed (the server "
        "was down) and follows `PICOBOT_SCHEDULE_MISSED`; at least 3 × `PICOBOT_SCHEDULE_POLL_SECONDS`",
        unit="s",
        ge=1,
    )
    schedule_missed: Literal["run_once", "skip"] = setting(
        "run_once",
        "what a missed scheduled prompt does: `run_once` runs the most recent missed time once (older ones "
        "are skipped), `skip` skips them all; either way the chat is told",
    )
    schedules_per_user: int = setting(
        20, "how many scheduled prompts one user (one Feishu chat) may have", ge=0, le=10_000
    )
    reconcile_quiet_seconds: float = setting(
        5.0,
        'a turn a WebSocket connection watches ([PROTOCOL "Convergence"](docs/PROTOCOL.md)) that shows '
        "nothing for this long is looked up in the database, so a final the channel layer dropped still "
        "reaches every connection; `0` turns the lookups off",
        unit="s",
        ge=0,
    )
    ws_snapshot_interval_ms: int = setting(
        33,
        "live snapshot throttle per WebSocket turn (≈30/s); a busy process stretches it with its event-loop "
        "lag, up to 1 s, instead of queueing frames",
        ge=0,
    )
    ws_max_unsent_bytes: int = setting(
        16 * 1024 * 1024,
        "a WebSocket whose client leaves more than this many bytes of output unread is closed "
        "(4408 in the log; a client that does not read usually just sees the connection drop), and the memory "
        "is freed; the client reconnects and resyncs, nothing is lost. `0`: no bound",
        ge=0,
    )

    # --- Feishu (Lark) --------------------------------------------------------------------------
    feishu_mode: Literal["webhook", "long_connection"] | None = setting(
        None,
        "how Feishu events arrive: `webhook` (the platform posts them to `/feishu/events/` on the server "
        "that serves HTTP) or `long_connection` (the official SDK's WebSocket client, started by `serve` "
        "and `runagent`; no public URL needed)",
        shown="*(unset → Feishu off)*",
    )
    feishu_app_id: str = setting("", "the Feishu app's App ID (`cli_…`)", max_length=64)
    feishu_app_secret: SecretStr = setting(SecretStr(""), "the app's App Secret", shown="")
    feishu_verification_token: SecretStr = setting(
        SecretStr(""),
        "the event subscription's Verification Token: every webhook event must carry it (also checked "
        "with an Encrypt Key)",
        shown="",
    )
    feishu_encrypt_key: SecretStr = setting(
        SecretStr(""),
        "the event subscription's Encrypt Key, if one is set: events arrive AES-encrypted and signed "
        "(`X-Lark-Signature`), and unsigned ones are refused",
        shown="",
    )
    feishu_api_base: str = setting(
        "https://open.feishu.cn",
        "the Open API's base URL (`https://open.larksuite.com` for Lark; tests point it at a local fake)",
    )
    feishu_streaming: Literal["card", "final_only"] = setting(
        "card",
        "`card`: one streaming card per answer, updated in place about twice a second; `final_only`: one "
        "message with the finished answer",
    )
    feishu_allowed_chats: CommaList = setting(
        [],
        "comma-separated chat ids (`oc_…`) the bot answers in; others are acknowledged and ignored",
        shown="*(unset → every chat that can reach the app)*",
    )
    feishu_max_event_age_hours: float = setting(
        12.0,
        "a message first received more than this many hours after it was sent (a redelivery after an "
        "outage) is acknowledged and logged, not answered; redeliveries are recognised at least this long; "
        "`0` answers messages of any age",
        ge=0,
    )

    feishu_recovery_seconds: float = setting(
        15.0,
        "how often each agent worker delivers again the Feishu answers whose final the platform has not "
        "confirmed (the process died between the platform's acceptance and its own record, or every "
        "attempt failed): those whose turn ended two periods plus the live process's own retry time "
        "(about 30 s) ago, with the same idempotency keys — and the unconfirmed notices of missed "
        "scheduled runs and ended background tasks. At most 900 s: a resend must fall within the "
        "platform's one-hour uuid de-duplication",
        unit="s",
        gt=0,
        le=900,
    )

    # --- sign-in and rate limits (issue 16; README "Authentication") ------------------------------
    login_failure_limit: int = setting(
        5,
        "wrong passwords (or tokens as the password) for one account on the WebUI or admin login before "
        "it is locked; the answer to the last one already says so, later tries are refused (429) unchecked",
        ge=1,
    )
    login_lockout_seconds: float = setting(
        60.0,
        "how long a locked login stays locked, and how long a wrong password counts; a try while locked "
        "starts it again",
        unit="s",
        gt=0,
    )
    login_lockout_by: Literal["account", "account_and_address"] = setting(
        "account",
        "what a lock covers: `account` (from every address), or `account_and_address` (only the address "
        "that guessed: nobody else can lock a user out, but guesses spread over many addresses are not slowed)",
    )
    auth_failures_per_address: int = setting(
        20,
        "failed sign-ins — API tokens (REST, WebSocket) and logins on any account — from one client address "
        "within the window before that address is refused (REST 429 `too_many_requests` with `Retry-After`, "
        "WebSocket close 4429, the login pages' 429 lockout page) without a lookup or password hash; "
        "counted in each server process. `0`: no limit",
        ge=0,
    )
    auth_failure_window_seconds: float = setting(
        60.0, "the window of `PICOBOT_AUTH_FAILURES_PER_ADDRESS`", unit="s", gt=0
    )
    user_messages_per_minute: int = setting(
        30,
        "messages (WebSocket `message` frames, slash commands but `/stop`, REST sends) one user may send per minute before they are "
        "refused, not stored (`rate_limited` with `retry_after`; REST 429); counted in each server process. "
        "`0`: no limit",
        ge=0,
    )
    secure_cookies: bool = setting(
        False,
        "mark the session and CSRF cookies `Secure` (sent over HTTPS only): set it when PicoBot is served "
        "over HTTPS, directly or behind a TLS proxy",
    )
    trust_forwarded_proto: bool = setting(
        False,
        "behind a TLS-terminating proxy that sets `X-Forwarded-Proto: https` (and strips it from clients): "
        "treat such requests as HTTPS (Django's `SECURE_PROXY_SSL_HEADER`)",
    )

    # --- usage, budgets, metrics, logs (issue 17; README "Usage and budgets", "Metrics") -------------
    user_daily_tokens: int = setting(
        0,
        "a user's input + output tokens per UTC day; past it a new turn is refused with a message "
        "(0: no budget)",
        ge=0,
    )
    user_daily_cost: float = setting(
        0.0,
        "a user's cost per UTC day, in the presets' price currency; past it a new turn is refused "
        "(0: no budget)",
        ge=0,
    )
    metrics_token: SecretStr = setting(
        SecretStr(""),
        "`GET /metrics` answers only with `Authorization: Bearer <this>` (unset: `/metrics` is off, 404)",
        shown="",
        repr=False,
    )
    metrics_dir: Path | None = setting(
        None,
        "prometheus-client's multiprocess directory: set the same empty directory for every process "
        "of a scale-out deployment so `/metrics` sums them",
        shown="*(unset → this process's numbers)*",
    )
    log_format: Literal["text", "json"] = setting(
        "text",
        "`json`: one JSON object a log line (python-json-logger), with `dialog_id` and `turn_id` on "
        "every line of a turn",
    )

    # --- Django -------------------------------------------------------------------------------
    secret_key: SecretStr = setting(
        SecretStr(""),
        "Django secret key (the same in every process)",
        shown="generated into `var/secret_key`",
    )
    debug: bool = setting(False, "Django debug mode (never in production)")
    allowed_hosts: CommaList = setting(
        ["localhost", "127.0.0.1", "[::1]"],
        "host names the server answers to; add your host name or IP when you serve with `--host 0.0.0.0`",
    )
    csrf_trusted_origins: CommaList = setting(
        [],
        "extra origins (`https://chat.example.com`) for logins and cookie WebSockets, e.g. behind an HTTPS "
        "proxy; by default only same-origin pages may open a cookie-authenticated WebSocket",
    )
    hsts_seconds: int = setting(
        0,
        "HTTPS deployments: `Strict-Transport-Security: max-age=N` on the answers to HTTPS requests "
        "(31536000 is a year; 0 sends none); see Security",
        unit="s",
        ge=0,
        le=2 * 365 * 24 * 3600,
    )
    time_zone: str = setting(
        "UTC", "Django's time zone (an IANA name), used by the admin; PicoBot's own texts show UTC"
    )
    log_level: str | int = setting(
        "INFO", "the root logger's level (a logging level name, any case, or a number)"
    )

    @model_validator(mode="before")
    @classmethod
    def _trimmed(cls, data: Any) -> Any:
        """Values lose surrounding whitespace (`` 1 `` is ``1``, for booleans too); a variable of
        spaces means its default, like an empty one."""
        if isinstance(data, dict):
            data = {key: value.strip() if isinstance(value, str) else value for key, value in data.items()}
            return {key: value for key, value in data.items() if value != ""}
        return data

    @field_validator("llm_provider", "feishu_mode", "feishu_streaming", "schedule_missed", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    _log_level = field_validator("log_level", mode="before")(rules.log_level)
    _comma_list = field_validator(
        "llm_hooks",
        "tool_modules",
        "allowed_hosts",
        "csrf_trusted_origins",
        "storage_retry_delays_ms",
        "feishu_allowed_chats",
        mode="before",
    )(rules.comma_list)
    _known_zone = field_validator("time_zone")(rules.known_zone)
    _origins = field_validator("csrf_trusted_origins")(rules.origins)
    _hosts = field_validator("allowed_hosts")(rules.hosts)
    _base_url = field_validator("llm_base_url", "feishu_api_base")(rules.http_url)

    @field_validator("llm_api_key")
    @classmethod
    def _header_safe_key(cls, value: SecretStr) -> SecretStr:
        rules.header_value(value.get_secret_value())
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: SecretStr) -> SecretStr:
        rules.redis_url(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.feishu_mode and not (self.feishu_app_id and self.feishu_app_secret.get_secret_value()):
            raise ValueError("PICOBOT_FEISHU_MODE needs PICOBOT_FEISHU_APP_ID and PICOBOT_FEISHU_APP_SECRET")
        if self.feishu_mode == "webhook" and not self.feishu_verification_token.get_secret_value():
            raise ValueError(
                "PICOBOT_FEISHU_MODE=webhook needs PICOBOT_FEISHU_VERIFICATION_TOKEN (the event subscription's)"
            )
        if self.lease_renew_seconds >= self.lease_seconds:
            raise ValueError("PICOBOT_LEASE_RENEW_SECONDS must be below PICOBOT_LEASE_SECONDS")
        if self.schedule_poll_seconds > 0 and self.schedule_grace_seconds < 3 * self.schedule_poll_seconds:
            raise ValueError(
                f"PICOBOT_SCHEDULE_GRACE_SECONDS ({self.schedule_grace_seconds:g} s) must be at least 3 × "
                f"PICOBOT_SCHEDULE_POLL_SECONDS ({self.schedule_poll_seconds:g} s): a due time is found up to "
                "one poll late, and a run found later than the grace counts as missed"
            )
        if self.group_refresh_seconds >= self.group_expiry_seconds:
            raise ValueError(
                "PICOBOT_GROUP_REFRESH_SECONDS must be below PICOBOT_GROUP_EXPIRY_SECONDS (defaults 3600 "
                "and 86400: members that re-join less often than they expire miss live updates)"
            )
        return self

    def replace(self, **changes: Any) -> PicoBotSettings:
        """A copy with ``changes`` (field names) applied and validated (tests, doctor's probe)."""
        unknown = set(changes) - set(type(self).model_fields)
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
        values = {**{name: getattr(self, name) for name in type(self).model_fields}, **changes}
        return type(self)(**{env_name(name): value for name, value in values.items()})

    def provider_config(self) -> ProviderConfig:
        """What :func:`providers.factory.build_provider` needs, from the ``llm_*``/``replay_*`` fields."""
        return ProviderConfig(
            provider=self.llm_provider,
            base_url=self.llm_base_url,
            api_key=self.llm_api_key.get_secret_value(),
            model=self.llm_model,
            max_tokens=self.llm_max_tokens,
            think_tags=self.llm_think_tags,
            anthropic_think_tags=self.llm_anthropic_think_tags,
            implicit_think_start=self.llm_implicit_think_start,
            connect_timeout=self.llm_connect_timeout,
            first_byte_timeout=self.llm_first_byte_timeout,
            idle_timeout=self.llm_idle_timeout,
            max_retries=self.llm_max_retries,
            max_connections=self.llm_max_connections,
            thinking_budget=self.llm_thinking_budget,
            replay_reasoning=self.llm_replay_reasoning,
            hooks=tuple(self.llm_hooks),
            replay_dir=str(self.replay_dir),
            replay_event_delay=self.replay_event_delay,
        )


def load_settings() -> PicoBotSettings:
    """The settings from the ``PICOBOT_*`` environment variables.

    Raises:
        ConfigError: one line naming every bad variable and what is wrong with it.
    """
    try:
        return PicoBotSettings()
    except ValidationError as exc:
        secret = frozenset(
            env_name(name)
            for name, field in PicoBotSettings.model_fields.items()
            if field.annotation is SecretStr or field.repr is False  # keys, URLs that may hold passwords
        )
        raise ConfigError(rules.describe_errors(exc, os.environ, secret)) from None
