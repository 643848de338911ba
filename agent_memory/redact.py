"""Keeping secrets out of logs, errors, artifacts and job rows."""

from __future__ import annotations

import re
from collections.abc import Iterable

# user:password@ in URLs, password=... in key/value DSNs, and bearer / sk- style keys
_URL_PASSWORD = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@\s]*)@", re.I
)
_KV_PASSWORD = re.compile(r"(?P<key>password\s*=\s*)(?P<pw>'[^']*'|\S+)", re.I)
_BEARER = re.compile(r"(?P<key>bearer\s+)(?P<tok>[A-Za-z0-9._~+/=-]{8,})", re.I)
_API_KEY = re.compile(r"\b(sk|pk|rk|key)-[A-Za-z0-9_-]{6,}\b")

REDACTED = "***"


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with DSN passwords, bearer tokens, API keys and the given secrets masked."""
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, REDACTED)
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    text = _KV_PASSWORD.sub(lambda m: f"{m['key']}{REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m['key']}{REDACTED}", text)
    return _API_KEY.sub(REDACTED, text)
