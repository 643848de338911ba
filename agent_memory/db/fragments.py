"""SQL fragments shared by the repositories. Module constants only: values always travel as
placeholders, never formatted into the text."""

# A scope's key (sql/0001_init.sql), and the exact, NULL-aware match of a scope through it
SCOPE_KEY = "agent_memory.scope_key(%(user_id)s, %(agent_id)s, %(workflow_id)s)"
SCOPE_MATCH = f"scope_key = {SCOPE_KEY}"

# The purge threshold the stored expiry days are relative to (sql/0012_durable_facts.sql).
THRESHOLD = "(SELECT purge_below FROM agent_memory.decay_policy)"


def importance_on(
    expires: str = "expires_day", day: str = "%(day)s", half_life: str = "half_life"
) -> str:
    """A fact's importance on ``day`` from its expiry day and half-life: the one definition
    (agent_memory.importance_on, sql/0012_durable_facts.sql)."""
    return f"agent_memory.importance_on({expires}, {day}, {half_life}, {THRESHOLD})"
