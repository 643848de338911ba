"""What went wrong, in words, at the head of an error: "connection refused to
http://127.0.0.1:8000", "401 from the provider at https://api.example.com", "no answer within
60 s from http://127.0.0.1:8000".

An LLM client's own message says the class before the cause ("InternalServerError:
litellm.InternalServerError: ... Connection error.") and never the host, so every failed scope
in a table looked the same. The errors of `agent_memory.extraction.call_errors` lead with one of
these phrases instead, then the classes. The phrases are the project's own words about a setting
(the provider's address, cut to scheme, host and port) and never a conversation's, so
:func:`leading_cause` can pick them out of an error for the orchestrator, which is otherwise told
only an error's class, size and hash (:mod:`agent_memory.pseudonyms`).
"""

from __future__ import annotations

import re
import socket
from urllib.parse import urlsplit

PROVIDER = "the provider"
# scheme://host:port and nothing else (no user, password, path or query)
_ORIGIN = (
    r"(?:[a-z][a-z0-9+.-]{0,31}://(?:[A-Za-z0-9.\-_]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])"
    r"(?::\d{1,5})?|the provider)"
)
_LEADING = re.compile(
    rf"^(?:connection refused to {_ORIGIN}"
    rf"|cannot reach {_ORIGIN}(?: \(no such host\))?"
    rf"|\d{{3}} from the provider(?: at {_ORIGIN})?"
    rf"|no answer within \d{{1,6}}(?:\.\d{{1,6}})? s from {_ORIGIN})"
)


def origin(url: str | None) -> str:
    """``url``'s scheme, host and port (``http://127.0.0.1:8000``); :data:`PROVIDER` if none."""
    if not url:
        return PROVIDER
    try:
        parts = urlsplit(str(url))
        host, port = parts.hostname, parts.port
    except ValueError:
        return PROVIDER
    if not parts.scheme or not host:
        return PROVIDER
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in found):
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def request_origin(exc: BaseException) -> str | None:
    """The address the failed request went to, as its HTTP client recorded it (the deepest
    one: a wrapper may record a default it did not use)."""
    urls = [getattr(getattr(e, "request", None), "url", None) for e in _chain(exc)]
    found = [origin(str(u)) for u in urls if u]
    return next((o for o in reversed(found) if o != PROVIDER), None)


def connection_cause(exc: BaseException, where: str) -> str | None:
    """ "connection refused to ..." or "cannot reach ..." when ``exc`` (or a cause of it) is a
    failure to connect; None otherwise."""
    chain = _chain(exc)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return f"connection refused to {where}"
    if any(isinstance(e, socket.gaierror) for e in chain):
        return f"cannot reach {where} (no such host)"
    names = {type(e).__name__ for e in chain}
    if any(isinstance(e, ConnectionError) for e in chain) or names & _CONNECT_ERRORS:
        return f"cannot reach {where}"
    return None


# the HTTP clients' names for a connection that could not be made (httpx, aiohttp, openai)
_CONNECT_ERRORS = {"ConnectError", "ClientConnectorError", "APIConnectionError"}


def http_status(exc: BaseException) -> int | None:
    """The HTTP status a client's error carries (``status_code``, or its response's), if any."""
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def status_cause(status: int, where: str) -> str:
    """ "401 from the provider at http://...": an HTTP status, and who sent it."""
    return f"{status} from the provider" + ("" if where == PROVIDER else f" at {where}")


def no_answer(seconds: float, where: str) -> str:
    """ "no answer within 60 s from http://...": a deadline that passed."""
    return f"no answer within {seconds:g} s from {where}"


def leading_cause(text: str) -> str | None:
    """The cause an error's text leads with, if it is one of this module's phrases."""
    found = _LEADING.match(text)
    return found.group(0) if found else None


def cause_first(error: str, width: int) -> str:
    """A job row's error (``Class: message``) for a table column of ``width`` characters: the
    message, which leads with the cause, then the class; cut with an ellipsis if longer."""
    kind, sep, message = error.partition(": ")
    if sep and kind.isidentifier():
        error = f"{message} [{kind}]"
    return error if len(error) <= width else error[: width - 1] + "\u2026"
