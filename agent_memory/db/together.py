"""An inject's two rankings as one statement: its facts (:mod:`agent_memory.db.recall`, over
levels :mod:`agent_memory.db.level_reads`) and its past messages
(:mod:`agent_memory.db.snippets`), each statement unchanged as a subquery of a ``UNION ALL``.

One statement instead of two costs an inject one round trip, one execution's start and end on
the server and one connection from the pool, where the two statements beside each other on
two connections cost each of those twice (docs/benchmarks.md, "CPU per inject"); the server
runs the two one after the other. Each row says which ranking it is of (its first column),
then carries that ranking's own columns in their places (the facts' first, the messages'
after them, NULL in the other's rows), in the order its ranking returned them: the executor
appends the second subquery's rows to the first's as each returns them. :func:`split` gives
each ranking its rows back as its statement alone returns them.

The two statements' values share one namespace: a name both use with the same value is sent
once, and a name the message search gives another value (its ``limit``) is renamed in its
statement (``s_limit``). When both rank for the same question, its words are parsed once, in
a first CTE that both read (``agent_memory.db.fulltext.QUESTION_WORDS``).
"""

from __future__ import annotations

import functools
from typing import Any

from agent_memory.db import native
from agent_memory.db.dual import Steps
from agent_memory.db.fulltext import QUESTION_WORDS
from agent_memory.db.query_vector import QueryVector
from agent_memory.db.recall import Ranking, fetch_ranking_steps

# the columns a ranking returns: facts, of one scope or over levels; messages
FACT_COLUMNS, LEVEL_FACT_COLUMNS, SNIPPET_COLUMNS = 4, 7, 11
_FACTS, _SNIPPETS = 1, 2
# the question's words as the statement's first CTE gives them to both rankings
_SHARED_WORDS = "(SELECT lexeme FROM question)"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, QueryVector) and isinstance(b, QueryVector):
        return a.payload == b.payload
    return type(a) is type(b) and bool(a == b)


@functools.lru_cache(maxsize=256)
def _statement(facts: str, fact_columns: int, snippets: str, renamed: frozenset[str]) -> str:
    """The two statements as one (see the module), the names ``renamed`` of the second
    prefixed ``s_``."""
    shared = ""
    if "text" not in renamed and QUESTION_WORDS in facts and QUESTION_WORDS in snippets:
        # one question: its words parsed once, for both
        shared = f"WITH question AS MATERIALIZED (SELECT {QUESTION_WORDS} AS lexeme)\n"
        facts = facts.replace(QUESTION_WORDS, _SHARED_WORDS)
        snippets = snippets.replace(QUESTION_WORDS, _SHARED_WORDS)
    snippets = native.renamed(snippets, renamed, "s_")

    def columns(alias: str, n: int) -> list[str]:
        return [f"{alias}.c{k}" for k in range(1, n + 1)]

    def named(n: int) -> str:
        return ", ".join(f"c{k}" for k in range(1, n + 1))

    fact_row = ", ".join(columns("f", fact_columns) + ["NULL"] * SNIPPET_COLUMNS)
    snippet_row = ", ".join(["NULL"] * fact_columns + columns("s", SNIPPET_COLUMNS))
    return f"""{shared}SELECT {_FACTS}, {fact_row}
FROM ({facts}) AS f({named(fact_columns)})
UNION ALL
SELECT {_SNIPPETS}, {snippet_row}
FROM ({snippets}) AS s({named(SNIPPET_COLUMNS)})"""


def together(facts: Ranking, fact_columns: int, snippets: Ranking) -> Ranking:
    """``facts`` (a ranking of ``fact_columns`` columns) and ``snippets`` as one statement."""
    renamed = frozenset(
        name
        for name, value in snippets.values.items()
        if name in facts.values and not _same(facts.values[name], value)
    )
    values = dict(facts.values)
    for name, value in snippets.values.items():
        if name in renamed:
            values[f"s_{name}"] = value
        elif name not in values:
            values[name] = value
    query = _statement(facts.query, fact_columns, snippets.query, renamed)
    return Ranking(query, values, facts.index or snippets.index)


def split(rows: list[Any], fact_columns: int) -> tuple[list[Any], list[Any]]:
    """The rows of each ranking of a statement of :func:`together`, as each returned them."""
    facts = [r[1 : 1 + fact_columns] for r in rows if r[0] == _FACTS]
    snippets = [r[1 + fact_columns :] for r in rows if r[0] == _SNIPPETS]
    return facts, snippets


def together_steps(
    facts: Ranking, fact_columns: int, snippets: Ranking
) -> Steps[tuple[list[Any], list[Any]]]:
    """Run both rankings as one statement; the rows of each."""
    statement = together(facts, fact_columns, snippets)
    rows = yield from fetch_ranking_steps(statement.query, statement.values, statement.index)
    return split(rows, fact_columns)
