"""SQL fragments shared by the repositories. Module constants only: values always travel as
placeholders, never formatted into the text."""

# A scope's key (sql/0001_init.sql), and the exact, NULL-aware match of a scope through it: the
# key's SQL form, which the planner inlines (agent_memory.scope_key, which the generated columns
# call, is PL/pgSQL so that a write does not inline it: sql/0036_writes_inline_less.sql)
SCOPE_KEY = "agent_memory.scope_key_inline(%(user_id)s, %(agent_id)s, %(workflow_id)s)"
SCOPE_MATCH = f"scope_key = {SCOPE_KEY}"

# The purge threshold the stored expiry days are relative to (sql/0012_durable_facts.sql).
THRESHOLD = "(SELECT purge_below FROM agent_memory.decay_policy)"


def importance_on(
    expires: str = "expires_day", day: str = "%(day)s", half_life: str = "half_life"
) -> str:
    """A fact's importance on ``day`` from its expiry day and half-life: the one definition
    (agent_memory.importance_on, sql/0012_durable_facts.sql)."""
    return f"agent_memory.importance_on({expires}, {day}, {half_life}, {THRESHOLD})"
