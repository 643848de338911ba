"""Exact full-text statistics per scope (sql/0017_term_counts.sql): the counts always equal a
recount of the scope's current rows, whatever wrote or removed them, and full-text ranking of a
backfilled scope (every fact sharing one expiry day, so no row order says anything) is BM25
over all its rows, as a reference computed here from the same lexemes ranks it."""

from __future__ import annotations

import json
import math
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from agent_memory import MemoryManager
from agent_memory.db import fulltext, fusion, level_reads, recall, snippet_queue
from agent_memory.db import term_counts as counts_repo
from agent_memory.decay import day_index, today
from agent_memory.models import Scope
from agent_memory.settings import Settings
from benchmarks.retrieval import load_facts

SCOPE, OTHER = Scope("backfilled", "agent"), Scope("other")

RECOUNT = """
SELECT 'f', m.scope_key, lexeme, count(*)::bigint, 0::bigint
FROM agent_memory.memory_items m, unnest(tsvector_to_array(m.search)) AS lexeme
WHERE m.superseded_at IS NULL GROUP BY 2, 3
UNION ALL
SELECT 'f', m.scope_key, '', count(*), sum(length(m.search))
FROM agent_memory.memory_items m WHERE m.superseded_at IS NULL GROUP BY 2
UNION ALL
SELECT 's', s.scope_key, lexeme, count(*), 0
FROM agent_memory.snippets s, unnest(tsvector_to_array(s.search)) AS lexeme GROUP BY 2, 3
UNION ALL
SELECT 's', s.scope_key, '', count(*), sum(length(s.search))
FROM agent_memory.snippets s GROUP BY 2
"""
KEPT = """
SELECT corpus::text, scope_key, lexeme, sum(docs)::bigint, sum(size)::bigint
FROM agent_memory.term_rows GROUP BY 1, 2, 3 HAVING sum(docs) <> 0 OR sum(size) <> 0
"""


def counts(db: psycopg.Connection[Any], query: str) -> set[tuple[Any, ...]]:
    return {tuple(r) for r in db.execute(query).fetchall()}


def episode(db: psycopg.Connection[Any], scope: Scope, *texts: str) -> int:
    """An episode of ``texts`` stored, and its sentences indexed (as the drain after a record
    does)."""
    messages = [{"role": "user", "content": t} for t in texts]
    row = db.execute(
        "INSERT INTO agent_memory.episodes (user_id, agent_id, messages, message_count)"
        " VALUES (%s, %s, %s, %s) RETURNING id",
        (scope.user_id, scope.agent_id, json.dumps(messages), len(messages)),
    ).fetchone()
    assert row is not None
    assert snippet_queue.drain_sync(db, [scope]) == 1
    return int(row[0])


def test_the_counts_equal_a_recount_after_every_kind_of_write(db: psycopg.Connection[Any]) -> None:
    load_facts(
        db,
        SCOPE,
        [
            {"content": "User drinks green tea every morning.", "importance": 0.5},
            {"content": "User works as a nurse in Leeds.", "importance": 0.8},
            {"content": "User has a tabby cat called Biscuit.", "importance": 0.6},
        ],
    )
    load_facts(db, OTHER, [{"content": "User drinks coffee.", "importance": 0.5}])
    first = episode(db, SCOPE, "I planted basil. The tomatoes are sprouting!", "Hi there.")
    episode(db, OTHER, "Nothing to say about basil.")
    assert counts(db, KEPT) == counts(db, RECOUNT)

    # supersession (an update of what counts), an edit of the words, a purge, a cascade
    db.execute(
        "UPDATE agent_memory.memory_items SET superseded_at = now()"
        " WHERE content LIKE 'User works%'"
    )
    db.execute(
        "UPDATE agent_memory.memory_items SET content = 'User drinks black coffee at dawn.'"
        " WHERE content LIKE 'User drinks green%'"
    )
    db.execute("DELETE FROM agent_memory.memory_items WHERE content LIKE '%Biscuit%'")
    db.execute("DELETE FROM agent_memory.episodes WHERE id = %s", (first,))
    assert counts(db, KEPT) == counts(db, RECOUNT)

    # an update that changes nothing counted (inject's reinforcement) appends nothing
    before = db.execute("SELECT count(*) FROM agent_memory.term_counts").fetchone()
    db.execute("UPDATE agent_memory.memory_items SET importance_at = now()")
    assert db.execute("SELECT count(*) FROM agent_memory.term_counts").fetchone() == before


def test_the_migrations_count_what_a_database_holds_and_can_run_again(
    db: psycopg.Connection[Any],
) -> None:
    from agent_memory.db.migrations import load_migrations

    load_facts(db, SCOPE, [{"content": "User drinks green tea every morning.", "importance": 0.5}])
    episode(db, SCOPE, "I planted basil. The tomatoes are sprouting!")
    db.execute("UPDATE agent_memory.snippets SET role = NULL")
    db.execute("DELETE FROM agent_memory.term_counts")  # as before version 17
    for migration in [m for m in load_migrations() if m.version in (17, 18)]:
        with db.transaction():
            db.execute(migration.sql.encode())
    assert counts(db, KEPT) == counts(db, RECOUNT) != set()
    roles = db.execute("SELECT DISTINCT role FROM agent_memory.snippets").fetchall()
    assert roles == [("user",)]


async def test_folding_keeps_the_sums_and_leaves_one_row_per_word(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    for n in range(5):
        episode(db, SCOPE, f"Basil number {n} is sprouting.")
        load_facts(db, SCOPE, [{"content": f"User grows basil batch {n}.", "importance": 0.5}])
    episode(db, OTHER, "Basil elsewhere.")
    spread = "SELECT count(*) FROM agent_memory.term_rows WHERE lexeme = 'basil'"
    assert db.execute(spread).fetchone() == (11,)  # one change per statement
    truth = counts(db, RECOUNT)

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        removed = await counts_repo.compact(conn, SCOPE)
        assert removed > 0
        assert counts(db, KEPT) == truth
        # the scope's words are one row each; the other scope's are not touched
        assert db.execute(spread).fetchone() == (3,)  # 'f' and 's' of SCOPE, 's' of OTHER
        assert await counts_repo.compact(conn, SCOPE) == 0  # nothing left to fold
        assert await counts_repo.compact(conn) >= 0
    assert counts(db, KEPT) == truth
    rows = db.execute(
        "SELECT count(*) = count(DISTINCT (corpus, scope_key, lexeme))"
        " FROM agent_memory.term_counts"
    ).fetchone()
    assert rows == (True,)


async def test_a_scope_being_folded_elsewhere_is_left_to_that_fold(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    for n in range(3):
        load_facts(db, SCOPE, [{"content": f"User grows basil batch {n}.", "importance": 0.5}])
    truth = counts(db, RECOUNT)
    with psycopg.connect(database_url) as other:  # a transaction folding the scope, not done
        other.execute(counts_repo.COMPACT_SCOPE, SCOPE.as_dict())
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            assert await counts_repo.compact(conn, SCOPE) == 0  # does not wait, folds nothing
            assert await counts_repo.compact(conn, OTHER) == 0  # another scope is free
        other.rollback()
    assert counts(db, KEPT) == truth


def test_a_new_facts_words_are_one_row_and_rank_as_once_folded(db: psycopg.Connection[Any]) -> None:
    """A new fact's words are appended as one row, its list (sql/0037); a ranking over lists not
    folded, of one scope or of two levels, returns the rows and scores it returns once the
    lists are folded into rows per word."""
    person = Scope("backfilled")
    rng = random.Random(37)
    facts = sorted({_fact(rng) for _ in range(80)})
    before = db.execute("SELECT count(*) FROM agent_memory.term_counts").fetchone()
    load_facts(db, SCOPE, [{"content": c, "importance": 0.5} for c in facts[:50]])
    load_facts(db, person, [{"content": c, "importance": 0.6} for c in facts[50:]])
    after = db.execute("SELECT count(*) FROM agent_memory.term_counts").fetchone()
    assert before is not None and after is not None and after[0] - before[0] == len(facts)
    listed = db.execute(
        "SELECT count(*) FROM agent_memory.term_counts WHERE words IS NOT NULL AND lexeme = ''"
    ).fetchone()
    assert listed == (len(facts),)
    levels = SCOPE.levels("user")
    assert levels == (SCOPE, person)
    questions = [" ".join(rng.sample(_WORDS, rng.randint(1, 4))) + "?" for _ in range(12)]

    def rankings() -> list[Any]:
        found = []
        for question in questions:
            params = fusion.ranked_params(
                SCOPE, question, on=today(), min_importance=0.0, limit=10, candidates=50
            )
            found.append(recall.ranked_sync(db, params))
            found.append(level_reads.ranked_levels_sync(db, params, levels))
        return found

    unfolded = rankings()
    assert any(ranked for ranked in unfolded)
    assert counts(db, KEPT) == counts(db, RECOUNT)
    db.execute(counts_repo.COMPACT_ALL)
    assert db.execute(
        "SELECT count(*) FROM agent_memory.term_counts WHERE words IS NOT NULL"
    ).fetchone() == (0,)
    assert counts(db, KEPT) == counts(db, RECOUNT)
    assert rankings() == unfolded


SPREAD = 32  # agent_memory.fold_fact_terms's, as store_put_memory calls it (sql/0030)
ASKING = 4  # one new fact in ASKING (by a hash of its id) asks whether to fold


def test_store_puts_fold_the_words_they_spread_and_searches_rank_alike(
    settings: Settings, db: psycopg.Connection[Any], database_url: str
) -> None:
    """A put through the Store folds its fact's words once they hold SPREAD rows in their scope:
    no word is summed over many more rows than that (the few puts until one that asks)
    however many puts came, the sums stay exact, and a search ranks as it does over a scope
    folded whole."""
    manager = MemoryManager.create_sync(settings=settings, migrate=False)
    try:
        store = manager.store()
        ns = ("memories", "alice")
        for n in range(6 * SPREAD + 5):
            store.put(ns, f"k{n}", {"content": f"User {n} likes tea and {_WORDS[n % 20]}."})
        most = db.execute(
            "SELECT max(n) FROM (SELECT count(*) AS n FROM agent_memory.term_rows"
            " GROUP BY corpus, scope_key, lexeme) AS c"
        ).fetchone()
        assert most is not None and 1 < most[0] <= SPREAD + 4 * ASKING
        assert counts(db, KEPT) == counts(db, RECOUNT)
        questions = ["does the user like tea?", "garden", "kayak and guitar", "nothing here"]
        before = [[(i.key, i.score) for i in store.search(ns, query=q)] for q in questions]
        db.execute(counts_repo.COMPACT_ALL)
        assert counts(db, KEPT) == counts(db, RECOUNT)
        after = [[(i.key, i.score) for i in store.search(ns, query=q)] for q in questions]
        assert after == before
    finally:
        manager.close_sync()


def test_puts_and_folds_at_once_keep_the_counts_exact(
    settings: Settings, db: psycopg.Connection[Any]
) -> None:
    """Writers putting to one scope at once, new keys and new wordings of old ones (which
    supersede a fact whose words may still be in a list), while their puts fold the scope's
    lists (sql/0037): the counts equal a recount after, and again once folded whole."""
    managers = [MemoryManager.create_sync(settings=settings, migrate=False) for _ in range(4)]
    ns = ("memories", "alice")

    def writer(n: int) -> None:
        store = managers[n].store()
        for i in range(3 * SPREAD):
            key = f"k{i % 24}" if i % 3 == 0 else f"w{n}-{i}"
            store.put(ns, key, {"content": f"User {n} {i} likes {_WORDS[(n * 7 + i) % 60]}."})

    try:
        with ThreadPoolExecutor(len(managers)) as pool:
            for done in [pool.submit(writer, n) for n in range(len(managers))]:
                done.result()
        folds = db.execute(
            "SELECT count(*) FROM agent_memory.term_counts WHERE lexeme <> '' AND corpus = 'f'"
        ).fetchone()
        assert folds is not None and folds[0] > 0  # the puts folded lists into word rows
        assert counts(db, KEPT) == counts(db, RECOUNT)
        db.execute(counts_repo.COMPACT_ALL)
        assert counts(db, KEPT) == counts(db, RECOUNT)
        listed = db.execute("SELECT count(*) FROM agent_memory.term_counts WHERE words IS NOT NULL")
        assert listed.fetchone() == (0,)
    finally:
        for manager in managers:
            manager.close_sync()


# ---- ranking a backfilled scope ----------------------------------------------------------

# words by how common they are: a few in most facts, many in a handful (as real text has)
_COMMON = ["user", "really", "weekend", "friend", "family", "home", "work", "time"]
_RARE = (
    "garden painting guitar marathon kayak pottery chess violin sourdough camping museum "
    "hiking yoga salsa novel poetry bakery tennis surfing cycling festival concert opera "
    "volunteer shelter puppy kitten parrot tortoise adoption mentor workshop seminar "
    "sunrise lake mountain forest desert island canyon glacier meadow harbour lighthouse "
    "recipe lasagna curry dumpling ramen pancake brownie smoothie espresso matcha"
)
_WORDS = [*_COMMON, *_RARE.split(" ")]


def _fact(rng: random.Random) -> str:
    common = rng.sample(_COMMON, rng.randint(1, 4))
    rare = rng.sample(_RARE.split(" "), rng.randint(1, 3))
    words = common + rare
    rng.shuffle(words)
    return " ".join(words).capitalize() + "."


def _reference(
    db: psycopg.Connection[Any], question: str
) -> tuple[list[tuple[int, float]], dict[str, int], float]:
    """BM25 over every current fact of the scope, as fulltext.text_hits defines it: each fact's
    id and share, best first; the question's words' document frequencies; the sum of IDF."""
    rows = db.execute(
        "SELECT id, tsvector_to_array(search), length(search), expires_day"
        " FROM agent_memory.memory_items WHERE superseded_at IS NULL"
        " AND scope_key = agent_memory.scope_key(%s, %s, %s)",
        (SCOPE.user_id, SCOPE.agent_id, SCOPE.workflow_id),
    ).fetchall()
    terms = db.execute(
        "SELECT lexeme FROM unnest(tsvector_to_array(to_tsvector('english', %s))) AS lexeme"
        " LIMIT 32",
        (question,),
    ).fetchall()
    words = [t[0] for t in terms]
    n = len(rows)
    avg = sum(r[2] for r in rows) / n
    df = {w: sum(1 for r in rows if w in r[1]) for w in words}
    idf = {w: math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) for w in words}
    total = sum(idf.values())
    scored = []
    for fact_id, lexemes, length, expires in rows:
        held = [w for w in words if w in lexemes and df[w] > 0]
        if not held:
            continue
        damp = 2.2 / (1 + 1.2 * (0.25 + 0.75 * length / max(avg, 1)))
        rank = sum(idf[w] * damp for w in held)
        scored.append((-rank, -expires, fact_id, min(1.0, rank / total)))
    scored.sort()
    return [(fact_id, share) for _, _, fact_id, share in scored], df, total


def test_a_backfilled_scope_ranks_as_bm25_over_all_its_rows(db: psycopg.Connection[Any]) -> None:
    rng = random.Random(36)
    facts = sorted({_fact(rng) for _ in range(2300)})[:2000]
    # one importance, one moment: every fact has the same expiry day, as a backfill's have
    load_facts(db, SCOPE, [{"content": c, "importance": 0.5} for c in facts])
    load_facts(db, OTHER, [{"content": c, "importance": 0.5} for c in facts[:300]])
    expiry = db.execute("SELECT count(DISTINCT expires_day) FROM agent_memory.memory_items")
    assert expiry.fetchone() == (1,)
    statement = f"WITH {recall._TEXT_HITS} SELECT id, n FROM text_hits ORDER BY r"  # noqa: S608 (our SQL)
    exact = bounded = 0
    for _ in range(60):
        question = " ".join(rng.sample(_WORDS, rng.randint(1, 4))) + "?"
        reference, df, total = _reference(db, question)
        got = db.execute(
            statement,
            {
                **SCOPE.as_dict(),
                "text": question,
                "day": day_index(today()),
                "min_importance": 0.0,
                "candidates": 50,
            },
        ).fetchall()
        shares = dict(reference)
        # every row returned has the share BM25 over all rows gives it
        for fact_id, share in got:
            assert math.isclose(share, shares[fact_id], rel_tol=1e-9), (question, fact_id)
        # the rarest words holding GATHER rows between them are gathered
        held = sorted((d, w) for w, d in df.items() if d > 0)
        gathered, running = set(), 0
        for d, w in held:
            running += d
            if running <= fulltext.GATHER:
                gathered.add(w)
        if len(gathered) == len(held):
            exact += 1
            assert [r[0] for r in got] == [r[0] for r in reference[:50]], question
        else:
            bounded += 1
            # a better row left out (neither holding a gathered word nor among the latest
            # rows) holds only words more common than those gathered, within the bound
            left = {w for _, w in held} - gathered
            bound = (
                2.2 / 1.3 * sum(math.log(1 + (2000 - df[w] + 0.5) / (df[w] + 0.5)) for w in left)
            )
            kept = {r[0] for r in got}
            for fact_id, share in reference[:50]:
                if fact_id not in kept:
                    assert share * total <= bound + 1e-9, (question, fact_id)
    assert exact >= 40 and bounded >= 1, (exact, bounded)  # both cases were exercised
