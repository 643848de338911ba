"""SQL fragments shared by the repositories. Module constants only: values always travel as
placeholders, never formatted into the text."""

# Exact, NULL-aware scope match through the indexed scope_key (see sql/0001_init.sql).
SCOPE_MATCH = "scope_key = agent_memory.scope_key(%(user_id)s, %(agent_id)s, %(workflow_id)s)"

# The decay constant -ln(factor) of the stored decay policy.
LAMBDA = "(SELECT -ln(factor) FROM agent_memory.decay_policy)"


def importance_on(rank: str = "decay_rank", day: str = "%(day)s") -> str:
    """A fact's importance on ``day`` from its ``rank`` column: the one definition
    (agent_memory.importance_on, sql/0011_current_importance.sql)."""
    return f"agent_memory.importance_on({rank}, {day}, {LAMBDA})"
