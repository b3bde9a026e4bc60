"""The gateway's autouse fixtures apply to these tests: fast worker loops, an empty runtime session cache."""

from tests.conversations.gateway_fixtures import fast_picobot, fresh_runtime_sessions  # noqa: F401 - autouse here
