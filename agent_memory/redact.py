"""Keeping secrets out of logs, errors, artifacts and job rows."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import unquote

# user:password@ in URLs, password=... in key/value DSNs, and bearer / sk- style keys.
# Every pattern runs in time linear in the text (a provider's error body can be megabytes): a
# URL scheme is at most 32 characters, and a URL's password ends at the first "/" (RFC 3986,
# and libpq, want it percent-encoded in one).
_URL_PASSWORD = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]{0,31}://)(?P<user>[^:/@\s]*):(?P<pw>[^/@\s]*)@", re.I
)
_KV_PASSWORD = re.compile(r"(?P<key>password\s*=\s*)(?P<pw>'[^']*'|\S+)", re.I)
_BEARER = re.compile(r"(?P<key>bearer\s+)(?P<tok>[A-Za-z0-9._~+/=-]{8,})", re.I)
_API_KEY = re.compile(
    r"\b(?:(?:sk|pk|rk|key|xai)-[A-Za-z0-9_-]{6,}"  # OpenAI, Anthropic (sk-ant-), xAI, ...
    r"|gsk_[A-Za-z0-9]{16,}"  # Groq
    r"|AIza[0-9A-Za-z_-]{30,}"  # Google
    r"|hf_[A-Za-z0-9]{20,})\b"  # Hugging Face
)
# environment variables whose values are secrets whatever they look like
_SECRET_NAME = re.compile(r"(API_KEY|_KEY|_TOKEN|_SECRET|PASSWORD|_PASS)$", re.I)

REDACTED = "***"

# the most of an error's text that is kept (a provider's error body can be megabytes)
MAX_ERROR_TEXT = 2000


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with DSN passwords, bearer tokens, API keys and the given secrets masked."""
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, REDACTED)
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    text = _KV_PASSWORD.sub(lambda m: f"{m['key']}{REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m['key']}{REDACTED}", text)
    return _API_KEY.sub(REDACTED, text)


def describe(error: BaseException, secrets: Iterable[str | None] = ()) -> str:
    """``error``'s type and message, secrets masked, at most :data:`MAX_ERROR_TEXT` characters
    (masked whole before it is cut, so no part of a secret survives the cut)."""
    text = redact(f"{type(error).__name__}: {error}", secrets)
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"{text[: MAX_ERROR_TEXT - 40]}... ({len(text):,} characters in all)"


def known_secrets(*values: str | None) -> list[str]:
    """``values`` plus every secret-looking environment variable and DSN password, to redact.

    Providers' keys may reach litellm through their own variables (OPENAI_API_KEY, ...), not
    only through our settings, and a DSN's password may be in URL or key=value form.
    """
    found = [v for v in values if v]
    for name, value in os.environ.items():
        if _SECRET_NAME.search(name) and len(value) >= 6:
            found.append(value)
    for value in [*found, os.environ.get("DATABASE_URL", "")]:
        found.extend(_dsn_passwords(value))
    return sorted(set(found), key=len, reverse=True)  # longest first: no partial masking


def _dsn_passwords(text: str) -> list[str]:
    passwords = [m["pw"] for m in _URL_PASSWORD.finditer(text)]
    passwords += [m["pw"].strip("'") for m in _KV_PASSWORD.finditer(text)]
    return [unquote(p) for p in passwords if len(p) >= 3] + [p for p in passwords if len(p) >= 3]
