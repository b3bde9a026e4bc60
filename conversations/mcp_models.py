"""MCP tool servers defined in the admin, and how each agent worker is doing with them (issue 18)."""

from __future__ import annotations

from django.db import models

from conversations.models import now_ms


class McpServer(models.Model):
    """An MCP tool server defined in the admin (issue 18; the ``[mcp_servers.NAME]`` tables of
    ``PICOBOT_CONFIG`` are the other source, and win a name clash).

    Only superusers add or change one: a stdio ``command`` runs code on the server. Secrets are
    never stored: ``env_from`` and ``headers_env`` hold the *names* of PicoBot's environment
    variables whose values are passed (``tools.mcp.config``). Agent workers read these rows every
    ``PICOBOT_MCP_REFRESH_SECONDS`` and restart a server whose row changed.
    """

    name = models.CharField(
        max_length=24, unique=True, help_text="tool name prefix: its tools are NAME__tool"
    )
    enabled = models.BooleanField(default=True)
    command = models.CharField(max_length=1000, blank=True, default="", help_text="stdio: the program to run")
    args = models.JSONField(
        default=list, blank=True, help_text='stdio: a JSON list, e.g. ["-m", "my_server"]'
    )
    env = models.JSONField(
        default=dict, blank=True, help_text="stdio: extra variables (JSON object; shown here: no secrets)"
    )
    env_from = models.JSONField(
        default=dict,
        blank=True,
        help_text='stdio: variable → NAME of PicoBot\'s environment variable holding its value, e.g. {"TOKEN": "GITHUB_TOKEN"}',
    )
    url = models.CharField(
        max_length=1000, blank=True, default="", help_text="streamable HTTP: the endpoint URL"
    )
    headers_env = models.JSONField(
        default=dict,
        blank=True,
        help_text='HTTP: header → NAME of PicoBot\'s environment variable holding its value, e.g. {"Authorization": "MCP_AUTH"}',
    )
    tools = models.JSONField(
        null=True,
        blank=True,
        help_text='allow list of the server\'s tool names (JSON list, e.g. ["read_file"]; leave the field blank for all)',
    )
    timeout = models.FloatField(
        null=True, blank=True, help_text="seconds per call (at most PICOBOT_TOOL_TIMEOUT)"
    )
    updated_at = models.BigIntegerField(default=now_ms)

    class Meta:
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    @property
    def target(self) -> str:
        """What it runs, as the status page shows it: the command with its args, or the URL."""
        if not self.command:
            return self.url
        args = self.args if isinstance(self.args, list) else []
        return " ".join([self.command, *(str(arg) for arg in args)])

    def table(self) -> dict:
        """The row as an ``[mcp_servers.NAME]`` table (``tools.mcp.config.parse_server``)."""
        table: dict = {"command": self.command, "url": self.url}
        if self.command:
            table.update(args=self.args, env=self.env, env_from=self.env_from)
        else:
            table["headers_env"] = self.headers_env
        if self.tools is not None:  # [] is refused as in the file: it would offer nothing
            table["tools"] = self.tools
        if self.timeout is not None:
            table["timeout"] = self.timeout
        return table


class McpServerStatus(models.Model):
    """How an MCP server is doing in one agent worker (written by the worker, read by the admin).

    ``seen_at`` (ms): the worker's last write; it rewrites its rows at least every
    ``tools.mcp.manager.STATUS_STAMP_SECONDS``, so rows of a worker that died without removing
    them show as gone and are pruned (``tools.mcp.sources``).
    """

    worker_id = models.CharField(max_length=200)
    name = models.CharField(max_length=64)
    source = models.CharField(max_length=32)
    transport = models.CharField(max_length=8)
    target = models.TextField(blank=True, default="")
    state = models.CharField(max_length=16)
    last_error = models.TextField(blank=True, default="")
    tools = models.JSONField(default=list, blank=True)
    skipped = models.JSONField(default=dict, blank=True)
    changed_at = models.FloatField(default=0)
    seen_at = models.BigIntegerField(default=now_ms)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["worker_id", "name"], name="mcp_status_worker_name")]

    def __str__(self) -> str:
        return f"{self.name} in {self.worker_id}"
