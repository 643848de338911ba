"""What Prefect is told: a scope's key, an error without its words, a repair note without the
model's values."""

from __future__ import annotations

import json

from agent_memory.errors import ExtractionError
from agent_memory.models import Scope
from agent_memory.pseudonyms import reveal, scope_key, summarise, unquoted

SECRET = b"s" * 32
WORDS = "my account number is 4711-0815"


def test_a_key_is_stable_per_secret_and_reveals_only_a_scope_it_was_made_from() -> None:
    alice, bob = Scope(user_id="alice"), Scope(user_id="alice", agent_id="support")
    key = scope_key(SECRET, alice)
    assert key == scope_key(SECRET, alice) and key.startswith("scope-") and len(key) == 22
    assert key not in {scope_key(SECRET, bob), scope_key(b"t" * 32, alice)}
    assert reveal(SECRET, key.upper(), [bob, alice]) == alice
    assert reveal(SECRET, key, [bob]) is None


def test_an_error_is_said_by_its_classes_size_and_hash_never_its_words() -> None:
    try:
        try:
            json.loads('{"facts": ' + json.dumps(WORDS))
        except ValueError as cause:
            raise ExtractionError(f"the model's answer is not JSON: {WORDS}") from cause
    except ExtractionError as error:
        said = summarise(error)
    assert said.startswith("ExtractionError <- JSONDecodeError (")
    assert "4711" not in said and "account" not in said
    # a job row's text: its first class and the classes it names as "Class: " are its causes
    row = f"TransientExtractionError: LLM call failed: BadRequestError: {WORDS}"
    said = summarise(row)
    assert said.startswith("TransientExtractionError <- BadRequestError (")
    assert "4711" not in said
    assert summarise(WORDS).startswith("error (30 characters, sha256 ")


def test_a_repair_note_keeps_its_words_and_says_the_models_values_by_size() -> None:
    note = f"fact 2: kind {WORDS!r} is not one of identity, preference"
    assert unquoted(note) == "fact 2: kind (30 characters) is not one of identity, preference"
    assert unquoted('took the array under key "x"') == "took the array under key (1 character)"
    assert unquoted("fact 1: there is no episode 9") == "fact 1: there is no episode 9"
