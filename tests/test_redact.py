"""Secrets are masked in every error text, in time linear in its length: a provider's error
body can be megabytes, and it is masked on the event loop that every scope shares."""

from __future__ import annotations

import threading

import pytest

from agent_memory.redact import MAX_ERROR_TEXT, REDACTED, describe, redact

MB = 1 << 20

# texts shaped to make a backtracking pattern try every start against every end
HOSTILE = {
    "letters and digits": "a1",
    "scheme-like runs": "x://a:",
    "dashes": "a-",
    "colons": "a:",
    "at signs": "x://a:b@",
    "key prefixes": "sk-",
    "google key prefixes": "AIza",
    "password keys": "password='",
    "bearer words": "bearer ",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.timeout(120)
def test_a_two_megabyte_hostile_text_is_masked_in_linear_time(name: str) -> None:
    # at this size a quadratic pattern runs for hours (39 s at 40,000 characters); a linear one
    # well under a second, so the deadline below is never what decides on a loaded machine
    text = (HOSTILE[name] * (2 * MB // len(HOSTILE[name]))) + " | postgresql://me:s3cr3t@db/x"
    out: list[str] = []
    worker = threading.Thread(target=lambda: out.append(redact(text)), daemon=True)
    worker.start()
    worker.join(timeout=90)
    assert out, f"redact() did not finish on 2 MB of {name!r}"
    assert out[0].endswith(f"postgresql://me:{REDACTED}@db/x")
    assert "s3cr3t" not in out[0]


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgresql://me:s3cr3t@db:5432/x", f"postgresql://me:{REDACTED}@db:5432/x"),
        ("--dsn-postgresql://me:s3cr3t@db/x", f"--dsn-postgresql://me:{REDACTED}@db/x"),
        ("redis://:s3cr3t@cache/0", f"redis://:{REDACTED}@cache/0"),
        ("http://u:p%2Fw@host/", f"http://u:{REDACTED}@host/"),
        ("host=db password='a b c' user=me", f"host=db password={REDACTED} user=me"),
        ("Authorization: Bearer abcdefgh12345", f"Authorization: Bearer {REDACTED}"),
        ("key sk-proj-abcdef123456 rejected", f"key {REDACTED} rejected"),
        ("no secret here: http://example.com/a:b", "no secret here: http://example.com/a:b"),
    ],
)
def test_every_form_of_secret_is_masked(text: str, masked: str) -> None:
    assert redact(text) == masked


def test_an_error_is_described_short_and_masked_whole_before_it_is_cut() -> None:
    secret = "zz-very-secret-value"
    # the secret straddles the cut: masking first leaves none of it
    body = "x" * (MAX_ERROR_TEXT - 50) + secret + "y" * (2 * MB)
    text = describe(RuntimeError(body), [secret])
    assert len(text) <= MAX_ERROR_TEXT
    assert text.startswith("RuntimeError: xxx")
    assert "zz-very" not in text and text.endswith("characters in all)")
    assert describe(ValueError("short"), []) == "ValueError: short"
