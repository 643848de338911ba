-- agent-memory schema, version 33: the words indexes that inject reads keep no pending list.
--
-- A GIN index with fastupdate on (PostgreSQL's default) puts new rows' words in a pending list
-- and moves them into the index proper only at VACUUM, or once the list passes
-- gin_pending_list_limit (4 MB). Until then every search of the index reads the whole list,
-- and the planner, pricing that, turns to reading the table itself: in a database that had
-- just grown by 30,000 sentences (autovacuum not round yet), the snippet search of an inject
-- read all of them, about fifteen times the time it took once VACUUM had emptied the list
-- (docs/benchmarks.md, issue 52). With fastupdate off, a row's words go into the index as the
-- row is written: the work moves to the writers (the snippet drain and the consolidation
-- flow, both in the background), and a search reads the index alone however recently the
-- table grew. The lists there are now are moved into the indexes once here.
-- Every statement is safe to re-run.
ALTER INDEX agent_memory.memory_items_search_idx SET (fastupdate = off);
ALTER INDEX agent_memory.snippets_search_idx SET (fastupdate = off);
ALTER INDEX agent_memory.snippets_scoped_search_idx SET (fastupdate = off);
SELECT gin_clean_pending_list(i::regclass)
FROM unnest(ARRAY['agent_memory.memory_items_search_idx',
                  'agent_memory.snippets_search_idx',
                  'agent_memory.snippets_scoped_search_idx']) AS i;
