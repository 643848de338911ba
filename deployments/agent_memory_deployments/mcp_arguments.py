"""The MCP server's guard on what a call may carry and what an error may say.

FastMCP drops an argument a tool does not take without a word (its argument models ignore
extra fields): a client that names a ``user_id`` on a server serving one user would have its
memory written to the server's user. :class:`StrictFastMCP` refuses such a call instead,
naming the arguments the tool does not take (and, for ``user_id``, why). And no error it
returns echoes more than :data:`MAX_ERROR_CHARS` characters of what the client sent: a
megabyte of content comes back as its first characters, not as the megabyte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import ContentBlock

# the longest error message a client is sent
MAX_ERROR_CHARS = 400

_USER_ARG = "user_id"


def cut(message: str) -> str:
    """``message`` cut to :data:`MAX_ERROR_CHARS` characters, saying how long it was."""
    if len(message) <= MAX_ERROR_CHARS:
        return message
    return f"{message[: MAX_ERROR_CHARS - 40]}... ({len(message)} characters in all)"


class StrictFastMCP(FastMCP[Any]):
    """FastMCP that refuses a call with arguments its tool does not take, and cuts every
    error it returns short (see the module)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any]
    ) -> Sequence[ContentBlock] | dict[str, Any]:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            unknown = sorted(set(arguments) - set(tool.parameters.get("properties", {})))
            if unknown:
                named = ", ".join(repr(a)[:60] for a in unknown[:5])
                why = (
                    ": this server serves one user and takes no user_id (start it with"
                    " --allow-user or --allow-any-user to let calls name one)"
                    if _USER_ARG in unknown
                    else ""
                )
                raise ToolError(cut(f"{name} takes no argument {named}{why}"))
        try:
            return await super().call_tool(name, arguments)
        except Exception as exc:
            raise ToolError(cut(str(exc))) from None
