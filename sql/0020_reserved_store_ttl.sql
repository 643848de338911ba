-- agent-memory schema, version 20: reserved for the Store's TTL (branch store-ttl), which
-- ships its own 0020. This placeholder only keeps the numbers gapless on this branch; the
-- merge replaces it with that migration.
SELECT 1;
