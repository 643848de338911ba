"""Full-text relevance within a scope: the question as a query, and BM25 over a scope's rows
with its exact statistics (``agent_memory.term_counts``), as SQL common table expressions that
the fact ranking (:mod:`agent_memory.db.recall`), the conversation search
(:mod:`agent_memory.db.snippets`) and the Store share.

BM25 with binary term frequency: each of the question's words a row holds adds its inverse
document frequency, damped by the row's length against the average (k1 = 1.2, b = 0.75).
ts_rank has no IDF, so a common word ("now", "work") would weigh as much as the one that
says what is asked. A question's first 32 distinct words (in lexeme order) are weighed.

Every text is parsed in its language, and the question by the same rule
(``agent_memory.search_vector``, sql/0034_text_in_its_language.sql): the stemmer and stop words
of the language whose stop words it holds most, and Chinese, Japanese and Korean runs as their
characters and pairs of characters.

The statistics are the scope's own, exact: how many of its rows hold each word, how many
rows it has and their total length, kept by ``agent_memory.term_counts`` (``corpus`` 'f'
for facts, 's' for conversation sentences; sql/0017_term_counts.sql) as rows are written,
whatever their order. A new fact's words are appended as one row: the fact's row of the
scope's size (lexeme '') lists them in ``words`` until a fold writes them into rows of their
own (sql/0037_fact_words_in_one_row.sql). The size's rows are read anyway, so their lists are
joined there (``c.words``) and each word's count adds how many lists hold it. The statistics
cover every current row of the scope; ``where`` may narrow the rows ranked (a date range, an
importance floor) but not the statistics. With no ``corpus`` (the Store's documents, a
namespace's rather than a scope's) they are counted over the rows ``where`` admits, on every
call.

The rows scored: every row of the scope holding one of the question's rarest words, in
order of rarity as many words as hold at most ``GATHER`` rows between them, and, among the
scope's ``_SAMPLE`` latest rows by ``tie``, every row holding any of its words; a large scope
so costs about what a small one does. A row holding only words more common than those
gathered, and older than the latest ``_SAMPLE``, is not scored; by BM25 it could score at
most ``1.69 * sum(idf)`` over those words, each of which is in more of the scope's rows than
any word that was gathered. A scope of ``_SAMPLE`` rows or fewer, or a question whose words
hold ``GATHER`` rows or fewer in all, is ranked exactly. The gathered words are read as a
value rather than joined, so that with none gathered the scope is not scanned whatever join
order a generic plan took (one made before the table had statistics scanned it all).

The sample is read only where it can add a row: when a word is too common to be gathered, or
when the scope is small enough to fit in it (``_SAMPLE`` rows by its statistics; reading it is
then cheaper than the words' index). A question whose words are all gathered reads a large
scope's rows holding them and nothing else, and one whose words the scope does not hold reads
no row at all. The words matched are the words weighed (the first 32), so a row holding only
a word past them is not a match.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.db.fragments import SCOPE_KEY, SCOPE_MATCH
from agent_memory.db.levels import level_key, merged

# The question's words, parsed as every text is (see the module), in lexeme order: a set of
# rows. NULL text: none; a message of stop words or punctuation only: none. A statement that
# ranks two corpora for one question reads them parsed once (agent_memory.db.together).
QUESTION_WORDS = "unnest(tsvector_to_array(agent_memory.search_vector(%(text)s)))"
# Any word of the message, ORed: the rows a question matches at all (an empty query for none,
# which matches nothing).
QUERY = f"""(SELECT coalesce(string_agg(quote_literal(lexeme), ' | '), '')::tsquery AS q
    FROM {QUESTION_WORDS} AS lexeme)"""


def text_hits(
    table: str,
    where: str,
    tie: str,
    corpus: str | None = None,
    levels: Sequence[str] = (),
    pending: str | None = None,
    scoped: bool = False,
) -> str:
    """CTEs ranking the rows of ``table`` (alias ``m``) that ``where`` admits by full text
    against the question: ``text_hits(id, r, n)``, rank ``r`` and the share ``n`` in [0, 1]
    of the question's weight that a row holds. Equal scores: the larger ``tie`` first. How
    they rank, and which rows they score: the module's docstring. ``corpus``: the kept counts
    of a scope's rows to read ('f' facts, 's' conversation sentences), or None to count the
    rows ``where`` admits (the Store's documents).

    ``levels``: ``where`` reads several levels of memory (``agent_memory.db.levels``), and
    these are its conditions for each level in turn (``level_key``). The levels are ranked as
    one corpus: their statistics summed (each level's read through its own key), and one sample
    of the latest ``_SAMPLE`` rows of them all, read in order from the levels' indexes merged
    (``agent_memory.db.levels.merged``). With every level but one empty, that level is ranked
    as it would be alone.

    ``pending``: the name of an earlier CTE of rows of the scope that ``table`` does not hold
    yet (a queued conversation's sentences, :mod:`agent_memory.db.snippets`), with ``id``,
    ``tie``, ``search`` and ``searched`` (whether ``where`` would admit it). They count in the
    statistics as if they were there, and every one ``searched`` that matches is scored with the
    rest: a row ranks as it will once stored (except an old one holding only common words, which
    the stored ranking may leave unscored, see below).

    ``scoped``: ``table`` has an index of its rows' words with their scope's own word
    (``agent_memory.scoped_search``, sql/0027_scoped_search.sql), so the rows holding the
    gathered words are read from the scope's entries alone rather than every scope's (the words
    of one exact scope: not with ``levels``).
    """
    counts, held = _statistics(table, where, corpus, levels, pending)

    def latest(match: str) -> str:
        return f"""SELECT m.id, m.{tie}, m.search FROM {table} m
    WHERE (SELECT sample FROM plan) AND {match}
    ORDER BY m.{tie} DESC LIMIT {_SAMPLE}"""

    sample = latest(where)
    if levels:
        sample = merged(len(levels), lambda n: latest(levels[n]), f"{tie} DESC", str(_SAMPLE))
    corpus_cte = f"corpus AS MATERIALIZED ({counts} AND %(text)s::text IS NOT NULL)"
    also = ""
    if pending is not None:
        corpus_cte = _with_pending(counts, pending)
        also = f"""
    UNION
    SELECT x.id, x.{tie}, x.search FROM {pending} x
    WHERE x.searched AND x.search @@ (SELECT q FROM asked)"""
    return f"""terms AS (
    SELECT lexeme, quote_literal(lexeme)::tsquery AS q
    FROM {QUESTION_WORDS} AS lexeme
    LIMIT 32
),
{corpus_cte},
weights AS MATERIALIZED (
    SELECT t.q, df.n AS df, ln(1 + (c.n - df.n + 0.5) / (df.n + 0.5)) AS idf, c.avg_len
    FROM terms t CROSS JOIN corpus c CROSS JOIN LATERAL ({held}) AS df
),
{_reading()},
sample AS MATERIALIZED (
    {sample}
),
gathered AS MATERIALIZED (
    SELECT string_agg(q::text, ' | ')::tsquery AS q
    FROM (SELECT q, sum(df) OVER (ORDER BY df, q::text) AS held FROM weights WHERE df > 0)
         AS rarest
    WHERE held <= {GATHER}
),
{_scored(where, tie, _holding(table, scoped), also)}"""


def _reading() -> str:
    """The CTEs saying what is read: ``asked``, the weighed words a row may hold to match, and
    ``plan``, whether the scope's latest rows are read as a sample (see the module)."""
    return f"""asked AS MATERIALIZED (
    SELECT string_agg(q::text, ' | ')::tsquery AS q FROM weights WHERE df > 0
),
plan AS MATERIALIZED (
    SELECT coalesce(sum(df) > {GATHER} OR (sum(df) > 0 AND (SELECT n FROM corpus) <= {_SAMPLE}),
                    false) AS sample
    FROM weights WHERE df > 0
)"""


def _scored(where: str, tie: str, holding: tuple[str, str], also: str) -> str:
    """The CTEs that score rows: ``matched``, the rows holding the gathered words (read from
    ``holding``: where, and the condition left) and the sample's rows holding any word
    (``also``: the waiting rows' too), and ``text_hits``, their BM25 ranks."""
    rows, condition = holding
    return f"""matched AS MATERIALIZED (
    SELECT m.id, m.{tie}, m.search FROM {rows}
    WHERE (NOT (SELECT sample FROM plan) OR (SELECT count(*) FROM sample) >= {_SAMPLE})
      AND (SELECT q FROM gathered) IS NOT NULL AND {where} {condition}
    UNION
    SELECT s.id, s.{tie}, s.search FROM sample s WHERE s.search @@ (SELECT q FROM asked){also}
),
text_hits AS (
    SELECT id, row_number() OVER (ORDER BY rank DESC, {tie} DESC, id) AS r,
           least(1, coalesce(rank / nullif((SELECT sum(idf) FROM weights), 0), 1)) AS n
    FROM (SELECT m.id, m.{tie},
                 (SELECT sum(w.idf) FROM weights w WHERE w.df > 0 AND m.search @@ w.q) * 2.2
                 / (1 + 1.2 * (0.25 + 0.75 * length(m.search)
                                      / greatest((SELECT avg_len FROM corpus), 1))) AS rank
          FROM matched m
          ORDER BY rank DESC, m.{tie} DESC, m.id LIMIT %(candidates)s) AS best
)"""


def _statistics(
    table: str, where: str, corpus: str | None, levels: Sequence[str], pending: str | None
) -> tuple[str, str]:
    """The statements of the corpus's size and average length (``counts``, from its one row)
    and of how many rows hold a term ``t.q`` (``held``): kept counts for a scope's
    ``corpus`` (over its ``levels``, with the ``pending`` rows added), else counted now."""
    if corpus is None:
        rows = f"SELECT count(*) AS n, coalesce(avg(length(m.search)), 0) AS avg_len FROM {table} m"
        held = f"SELECT count(*) AS n FROM {table} m WHERE {where} AND m.search @@ t.q"
        return f"{rows} WHERE {where}", held

    def counted(lexeme: str) -> str:
        kept = "agent_memory.term_counts k"
        if not levels:
            scope = f"k.corpus = '{corpus}' AND k.{SCOPE_MATCH}"
            return f"{kept} WHERE {scope} AND k.lexeme = {lexeme}"
        match = f"k.corpus = '{corpus}' AND k.lexeme = {lexeme}"
        # each level's counts read through the whole (corpus, scope_key, lexeme) key: ANY
        # over the keys, or a join with them, is planned (without statistics, or in a
        # generic plan) as a scan of every scope's counts of the word
        each = "\n        UNION ALL ".join(
            f"SELECT k.docs, k.size, k.words FROM {kept}"
            f" WHERE {match} AND k.scope_key = {level_key(n)}"
            for n in range(len(levels))
        )
        return f"({each}) AS k WHERE true"

    # the words of the facts not folded yet, one entry a fact (c.words: see the module)
    counts = f"""SELECT coalesce(sum(k.docs), 0) AS n,
           coalesce(sum(k.size), 0)::float8 / greatest(coalesce(sum(k.docs), 0), 1) AS avg_len,
           agent_memory.cat_words(k.words) AS words
    FROM {counted("''")}"""
    # to a word's kept count: the lists that hold it, and the waiting rows that do
    added = "coalesce(cardinality(array_positions(c.words, t.lexeme)), 0)"
    if pending is not None:
        added += f" + (SELECT count(*) FROM {pending} x WHERE x.search @@ t.q)"
    held = f"SELECT coalesce(sum(k.docs), 0) + {added} AS n FROM {counted('t.lexeme')}"
    return counts, held


def _holding(table: str, scoped: bool) -> tuple[str, str]:
    """Where the rows holding the gathered words are read from, and the condition left to
    test on them."""
    if not scoped:
        return f"{table} m", "AND m.search @@ (SELECT q FROM gathered)"
    # OFFSET 0: the scope's condition stays outside, or a generic plan, sizing a scope at a
    # few rows, reads it in time order and tests each row
    return (
        f"""(SELECT * FROM {table} x
          WHERE agent_memory.scoped_search(x.scope_key, x.search)
                @@ ((SELECT q FROM gathered) && agent_memory.scope_word({SCOPE_KEY}))
          OFFSET 0) AS m""",
        "",
    )


def _with_pending(counts: str, pending: str) -> str:
    """The corpus CTE: the stored rows' statistics, and the waiting rows' added to them."""
    return f"""indexed AS MATERIALIZED ({counts} AND %(text)s::text IS NOT NULL),
corpus AS MATERIALIZED (
    SELECT s.n + w.n AS n, (s.avg_len * greatest(s.n, 1) + w.size) / greatest(s.n + w.n, 1)
           AS avg_len, s.words
    FROM indexed s,
         (SELECT count(*) AS n, coalesce(sum(length(x.search)), 0) AS size FROM {pending} x) w
)"""


# the scope's latest rows, whose matches are scored whatever their words (see text_hits)
_SAMPLE = 500
# the rows a question's rarest words may hold between them to be scored (see text_hits)
GATHER = 500
