"""Who may call the MCP server over HTTP: the holders of its bearer token.

Anyone who reaches the server's port gets its tools, and with ``--allow-any-user`` every
user's memory. On loopback that is this machine's users; on any other address, the network.
So a server that listens beyond loopback must have a token (``--auth-token`` or
``AGENT_MEMORY_MCP_AUTH_TOKEN``) and refuses to start without one, naming the flag; on loopback
a token is optional, and used when given. With a token, every HTTP request must carry
``Authorization: Bearer <token>``; any other gets 401 before it reaches the MCP session.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import Any

from mcp.server.fastmcp import FastMCP
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_memory.errors import ConfigurationError

TOKEN_FLAG = "--auth-token"
TOKEN_VARIABLE = "AGENT_MEMORY_MCP_AUTH_TOKEN"
MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only. A
    name other than ``localhost`` is not: what it resolves to is not the server's to say."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None, *, any_user: bool) -> None:
    """Refuse, before anything listens, to serve HTTP on ``host`` without ``token`` when
    ``host`` is not loopback (naming the flag), and a token too short to be a secret."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(
            f"the MCP auth token ({TOKEN_FLAG} or {TOKEN_VARIABLE}) is {len(token)} characters"
            f" long; use {MIN_TOKEN_CHARS} at least, e.g. from `openssl rand -hex 32`"
        )
    if token is None and not is_loopback(host):
        who = "every user's memory (--allow-any-user)" if any_user else "its memory"
        raise ConfigurationError(
            f"--host {host} would serve {who} to the network with no authentication: give"
            f" {TOKEN_FLAG} TOKEN (or set {TOKEN_VARIABLE}), which every client must send as"
            " 'Authorization: Bearer TOKEN', or listen on loopback (--host 127.0.0.1)"
        )


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class BearerAuth:
    """ASGI middleware: an HTTP request passes only with ``Authorization: Bearer <token>``,
    compared in constant time (as digests, so not even the token's length shows); any other
    gets 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = _digest(token.encode("utf-8"))

    def _allowed(self, scope: Scope) -> bool:
        header = dict(scope.get("headers") or ()).get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        matches = hmac.compare_digest(_digest(given.strip()), self._expected)
        return scheme.lower() == b"bearer" and matches

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {"error": "unauthorized", "error_description": "a valid bearer token is required"},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="agent-memory"'},
        )
        await response(scope, receive, send)


async def serve_http(server: FastMCP[Any], token: str | None) -> None:
    """Serve ``server`` over streamable HTTP at its host and port (as ``server.run`` does),
    behind :class:`BearerAuth` when there is a ``token``."""
    import uvicorn

    app: ASGIApp = server.streamable_http_app()
    if token is not None:
        app = BearerAuth(app, token)
    config = uvicorn.Config(
        app,
        host=server.settings.host,
        port=server.settings.port,
        log_level=server.settings.log_level.lower(),
    )
    await uvicorn.Server(config).serve()
