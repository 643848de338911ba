"""The vectors' tables in a migration (sql/0029_vector_tables.sql, issue 41): a database whose
tables the old first-use code made migrates without a change to its rows or indexes, a new
database gets the same tables, a role that may not create pgvector migrates without them and
gets them from ensure() once pgvector is there, and a later vector migration reaches it too."""

from __future__ import annotations

from typing import Any

import psycopg

from agent_memory.db import ann_indexes
from agent_memory.db import embeddings as embedding_repo
from agent_memory.db import episodes as episode_repo
from agent_memory.db.migrations import (
    Migration,
    apply_vector_migrations,
    current_version,
    load_migrations,
    migrate,
)
from agent_memory.models import Scope
from benchmarks.retrieval import load_facts

ALEX = Scope("alex", "assistant")

# The state of a database from before schema 29: what agent_memory.db.embeddings.ensure() ran
# on first use, copied as it stood (it is no longer anywhere in the code).
OLD_ENSURE = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS agent_memory.fact_embeddings (
    fact_id    bigint PRIMARY KEY
               REFERENCES agent_memory.memory_items (id) ON DELETE CASCADE,
    model      text NOT NULL,
    embedding  vector NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS fact_embeddings_model_idx ON agent_memory.fact_embeddings (model);
-- the messages of past conversations (sql/0009); a message the model refused has a NULL
-- embedding, so it is not asked for again (full text still finds it)
CREATE TABLE IF NOT EXISTS agent_memory.snippet_embeddings (
    snippet_id bigint PRIMARY KEY REFERENCES agent_memory.snippets (id) ON DELETE CASCADE,
    model      text NOT NULL,
    embedding  vector
);
-- each vector carries its scope, so a scope's nearest are read from its own rows (and, for a
-- large scope, from an index of its own: see ensure_ann_index)
ALTER TABLE agent_memory.fact_embeddings ADD COLUMN IF NOT EXISTS scope_key text COLLATE "C";
ALTER TABLE agent_memory.snippet_embeddings ADD COLUMN IF NOT EXISTS scope_key text COLLATE "C";
UPDATE agent_memory.fact_embeddings e SET scope_key = m.scope_key
FROM agent_memory.memory_items m WHERE m.id = e.fact_id AND e.scope_key IS NULL;
UPDATE agent_memory.snippet_embeddings e SET scope_key = m.scope_key
FROM agent_memory.snippets m WHERE m.id = e.snippet_id AND e.scope_key IS NULL;
CREATE INDEX IF NOT EXISTS fact_embeddings_scope_idx
    ON agent_memory.fact_embeddings (scope_key, model);
CREATE INDEX IF NOT EXISTS snippet_embeddings_scope_idx
    ON agent_memory.snippet_embeddings (scope_key, model);
-- the approximate nearest-neighbour (HNSW) indexes of large scopes, one per scope and model
CREATE TABLE IF NOT EXISTS agent_memory.ann_indexes (
    kind       text NOT NULL CHECK (kind IN ('facts', 'snippets')),
    scope_key  text COLLATE "C" NOT NULL,
    model      text NOT NULL,
    dims       integer NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, scope_key, model)
);
-- a keyed hash of the scope key (sql/0019), which a large scope's own HNSW index names
ALTER TABLE agent_memory.fact_embeddings ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
ALTER TABLE agent_memory.snippet_embeddings ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
ALTER TABLE agent_memory.ann_indexes ADD COLUMN IF NOT EXISTS scope_tag text COLLATE "C";
-- tenant mode (sql/0016_tenants.sql): a tenant reads its own scope's vectors only
DO $$
BEGIN
    IF to_regprocedure('agent_memory.protect_vectors()') IS NOT NULL THEN
        PERFORM agent_memory.protect_vectors();
    END IF;
END
$$;
"""

TABLES = ("fact_embeddings", "snippet_embeddings", "ann_indexes")


def structure(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """What the vector tables are: columns, constraints, indexes, policies, row security."""
    queries = {
        "columns": """
            SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                   pg_get_expr(d.adbin, d.adrelid), co.collname
            FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'agent_memory'
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            LEFT JOIN pg_collation co ON co.oid = a.attcollation AND co.collname <> 'default'
            WHERE c.relname = ANY(%(tables)s) AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY 1, a.attnum""",
        "constraints": """
            SELECT c.relname, k.conname, pg_get_constraintdef(k.oid)
            FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'agent_memory'
            WHERE c.relname = ANY(%(tables)s) ORDER BY 1, 2""",
        "indexes": """
            SELECT tablename, indexname, indexdef FROM pg_indexes
            WHERE schemaname = 'agent_memory'
              AND tablename = ANY(%(tables)s)
            ORDER BY 1, 2""",
        "policies": """
            SELECT tablename, policyname, cmd, roles::text[], qual, with_check FROM pg_policies
            WHERE schemaname = 'agent_memory'
              AND tablename = ANY(%(tables)s)
            ORDER BY 1, 2""",
        "row security": """
            SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'agent_memory'
            WHERE c.relname = ANY(%(tables)s) ORDER BY 1""",
    }
    return {
        name: conn.execute(query, {"tables": list(TABLES)}).fetchall()
        for name, query in queries.items()
    }


def contents(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """The vector tables' rows, and the files that hold them and their indexes (a rewrite of a
    table or a rebuild of an index would give it a new one)."""
    return {
        "facts": conn.execute(
            "SELECT fact_id, scope_key, scope_tag, model, embedding::text, created_at"
            " FROM agent_memory.fact_embeddings ORDER BY 1"
        ).fetchall(),
        "snippets": conn.execute(
            "SELECT snippet_id, scope_key, scope_tag, model, embedding::text"
            " FROM agent_memory.snippet_embeddings ORDER BY 1"
        ).fetchall(),
        "ann_indexes": conn.execute(
            "SELECT kind, scope_key, scope_tag, model, dims, name, created_at"
            " FROM agent_memory.ann_indexes ORDER BY 1, 2, 3"
        ).fetchall(),
        "files": conn.execute(
            """SELECT c.relname, pg_relation_filenode(c.oid) FROM pg_class c
                JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'agent_memory'
                WHERE c.relname = ANY(%(tables)s)
                   OR c.oid IN (SELECT i.indexrelid FROM pg_index i JOIN pg_class c ON
                                c.oid = i.indrelid WHERE c.relname = ANY(%(tables)s))
                ORDER BY 1""",
            {"tables": list(TABLES)},
        ).fetchall(),
    }


def tables(conn: psycopg.Connection[Any]) -> list[str]:
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'agent_memory'"
            " AND tablename = ANY(%s) ORDER BY 1",
            (list(TABLES),),
        ).fetchall()
    ]


async def test_a_database_whose_tables_the_old_first_use_made_migrates_unchanged(
    empty_database: psycopg.Connection[Any],
) -> None:
    db = empty_database
    migrations = load_migrations()
    migrate(db, migrations=migrations[:28])
    db.execute(OLD_ENSURE)
    # facts, a conversation's messages, their vectors, and a scope's own HNSW index
    load_facts(
        db, ALEX, [{"content": f"User likes colour {i}.", "importance": 0.5} for i in range(3)]
    )
    talk = [
        {"role": "user", "content": "Chess tonight. Bring the board."},
        {"role": "assistant", "content": "Sure."},
    ]
    episode_repo.insert_sync(db, ALEX, talk, {})
    # drained as that release drained, by the schema's own function
    assert db.execute("SELECT agent_memory.index_pending(200, NULL)").fetchone() == (1,)
    db.execute(
        """INSERT INTO agent_memory.fact_embeddings (fact_id, scope_key, scope_tag, model,
                                                     embedding)
           SELECT id, scope_key, agent_memory.scope_tag(scope_key), 'm',
                  ('[' || id || ', 0.5, -1]')::vector
           FROM agent_memory.memory_items;
           INSERT INTO agent_memory.snippet_embeddings (snippet_id, scope_key, scope_tag, model,
                                                        embedding)
           SELECT id, scope_key, agent_memory.scope_tag(scope_key), 'm',
                  CASE WHEN id % 2 = 0 THEN ('[0.25, ' || id || ', 1]')::vector END
           FROM agent_memory.snippets;"""
    )
    key = db.execute("SELECT agent_memory.scope_key('alex', 'assistant', NULL)").fetchone()
    assert key is not None
    tag = db.execute("SELECT agent_memory.scope_tag(%s)", (key[0],)).fetchone()
    assert tag is not None
    index = "fact_embeddings_ann_old"  # a scope's index as the releases before 32 built it
    db.execute(
        f"""CREATE INDEX {index} ON agent_memory.fact_embeddings USING hnsw
                ((embedding::vector(3)) vector_cosine_ops)
            WHERE scope_tag = '{tag[0]}' AND model = 'm'
              AND vector_dims(embedding) = 3 AND embedding IS NOT NULL"""
    )
    db.execute(
        """INSERT INTO agent_memory.ann_indexes (kind, scope_key, scope_tag, model, dims, name)
           VALUES ('facts', %s, %s, 'm', 3, %s)""",
        (key[0], tag[0], index),
    )
    before, shape = contents(db), structure(db)
    assert len(before["facts"]) == 3 and len(before["snippets"]) == 3
    # a refused message (no vector) among them
    assert {r[4] is None for r in before["snippets"]} == {True, False}
    assert before["ann_indexes"][0][5] == index

    assert migrate(db, migrations=migrations[:29])[0] == "0029_vector_tables"

    assert contents(db) == before
    assert structure(db) == shape
    valid = db.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
        (f"agent_memory.{index}",),
    ).fetchone()
    assert valid == (True,)
    assert embedding_repo.ensure(db) is None
    # the migration's text run again (as ensure runs it) changes nothing either
    assert apply_vector_migrations(db) == ["0029_vector_tables"]
    assert contents(db) == before and structure(db) == shape
    # the later migrations keep the index and record what it holds: the whole vectors
    migrate(db)
    assert contents(db) == before
    ann = ann_indexes.ann_index_sync(db, "facts", ALEX, "m")
    assert ann is not None and (ann.dims, ann.vector_type) == (3, "vector")


def test_a_new_database_gets_the_tables_the_old_first_use_made(
    empty_database: psycopg.Connection[Any], db: psycopg.Connection[Any]
) -> None:
    old = empty_database
    migrate(old, migrations=load_migrations()[:28])
    old.execute(OLD_ENSURE)
    migrate(old)  # the later migrations, to the end
    # db: the tests' template, migrated to the end by a superuser
    assert tables(db) == sorted(TABLES)
    assert structure(db) == structure(old)
    assert embedding_repo.ensure(db) is None


def test_a_role_that_may_not_create_pgvector_migrates_and_gets_the_tables_once_it_is_there(
    app_database_url: str, pg_server: dict[str, Any], db: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(app_database_url, autocommit=True) as app:
        assert "0029_vector_tables" in migrate(app)  # recorded, though it made nothing
        assert current_version(app) == len(load_migrations())
        assert tables(app) == []
        reason = embedding_repo.ensure(app)
        assert reason == 'InsufficientPrivilege: permission denied to create extension "vector"'
        assert tables(app) == []

        # a DBA installs pgvector in the database: the role's next ensure() makes the tables,
        # from the migration's own text
        dbname = app.info.dbname
        server = {k: str(v) for k, v in pg_server.items()}
        with psycopg.connect(dbname=dbname, autocommit=True, **server) as admin:
            admin.execute("CREATE EXTENSION vector")
        assert embedding_repo.ensure(app) is None
        assert tables(app) == sorted(TABLES)
        owners = app.execute(
            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'agent_memory'"
            " AND tablename = ANY(%s)",
            (list(TABLES),),
        ).fetchall()
        assert owners == [(app.info.user,)]
        # the same tables as a superuser's migration made, tenant policies included
        assert structure(app) == structure(db)
        assert structure(app)["policies"]


def test_a_later_vector_migration_reaches_a_database_that_gets_pgvector_after_migrating(
    app_database_url: str, pg_server: dict[str, Any]
) -> None:
    vector_migrations = [m.name for m in load_migrations() if m.vectors]
    assert vector_migrations == ["0029_vector_tables", "0032_ann_index_type"]
    later = [
        *load_migrations(),
        # a change to a vector table, written by the rule in sql/0029's header
        Migration(
            len(load_migrations()) + 1,
            "9999_fact_vector_notes",
            """-- a change to the vectors' tables
-- vector migration
DO $$
BEGIN
    IF to_regclass('agent_memory.ann_indexes') IS NULL THEN
        RETURN;
    END IF;
    ALTER TABLE agent_memory.fact_embeddings ADD COLUMN IF NOT EXISTS note text;
END
$$;""",
        ),
        # not a vector migration: not run again
        Migration(
            len(load_migrations()) + 2,
            "9999_other",
            "CREATE TABLE agent_memory.other_thing (x int)",
        ),
    ]
    with psycopg.connect(app_database_url, autocommit=True) as app:
        assert migrate(app, migrations=later)[-2:] == ["9999_fact_vector_notes", "9999_other"]
        assert tables(app) == []
        server = {k: str(v) for k, v in pg_server.items()}
        with psycopg.connect(dbname=app.info.dbname, autocommit=True, **server) as admin:
            admin.execute("CREATE EXTENSION vector")
        # in order: the tables, then the change to them
        assert apply_vector_migrations(app, migrations=later) == [
            *vector_migrations,
            "9999_fact_vector_notes",
        ]
        note = app.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'agent_memory.fact_embeddings'::regclass AND attname = 'note'"
        ).fetchone()
        assert note == ("text",)
