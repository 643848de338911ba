"""The MCP server's settings (``agent-memory mcp``)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from agent_memory.settings._env import EnvSettings


class MCPSettings(EnvSettings):
    """Who may call the MCP server over HTTP (``agent-memory mcp --port``)."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_MEMORY_MCP_", env_file=".env", extra="ignore"
    )

    auth_token: SecretStr | None = Field(
        default=None,
        description="the secret every HTTP request to the MCP server must carry "
        "(`Authorization: Bearer <token>`, 16 characters at least; else 401). Required to listen "
        "beyond loopback (`--host`); optional on loopback. `--auth-token` overrides it",
    )
