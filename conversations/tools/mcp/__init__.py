"""MCP client tools: servers from ``PICOBOT_CONFIG`` and the admin, their tools in the registry.

``config`` (pure: the ``[mcp_servers.NAME]`` tables), ``results`` (pure: a tool result as text),
``connection`` (one server over the official ``mcp`` SDK, supervised), ``manager``
(``McpManager``: every server of the worker, their tools in its registry). See ``tools/README.md``.
"""
