"""SQL fragments shared by the repositories. Module constants only: values always travel as
placeholders, never formatted into the text."""

# Exact, NULL-aware scope match through the indexed scope_key (see sql/0001_init.sql).
SCOPE_MATCH = "scope_key = agent_memory.scope_key(%(user_id)s, %(agent_id)s, %(workflow_id)s)"

# The purge threshold the stored expiry days are relative to (sql/0012_durable_facts.sql).
THRESHOLD = "(SELECT purge_below FROM agent_memory.decay_policy)"


def kind_half_life(kind: str = "%(kind)s") -> str:
    """The policy's half-life in days of fact kind ``kind`` (general's for a kind it lacks)."""
    return (
        f"(SELECT coalesce((half_lives->>{kind})::float8, (half_lives->>'general')::float8)"
        " FROM agent_memory.decay_policy)"
    )


def importance_on(
    expires: str = "expires_day", day: str = "%(day)s", half_life: str = "half_life"
) -> str:
    """A fact's importance on ``day`` from its expiry day and half-life: the one definition
    (agent_memory.importance_on, sql/0012_durable_facts.sql)."""
    return f"agent_memory.importance_on({expires}, {day}, {half_life}, {THRESHOLD})"


def expiry(importance: str, day: str, half_life: str) -> str:
    """The day a fact of ``importance`` on ``day`` with ``half_life`` falls below the
    threshold: what ``expires_day`` stores."""
    return f"agent_memory.expiry({importance}, {day}, {half_life}, {THRESHOLD})"
