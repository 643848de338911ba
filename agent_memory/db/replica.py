"""How far behind its primary a read replica is, asked on the replica itself."""

from __future__ import annotations

from dataclasses import dataclass

from agent_memory.db.dual import Run, Steps, dual

# Seconds behind, as the replica sees it. Caught up (it has replayed all the WAL it received)
# is 0 however long ago the last commit was: on a quiet primary, now() minus the last replayed
# commit grows without anything to replay. Behind, it is the time since the last commit it
# replayed (the primary's clock against the replica's: their skew adds to it), or NULL when it
# has replayed none since it started. NULL too when it is not streaming (no WAL receiver: its
# primary is away, or it restores from an archive): it cannot know what it has not received.
# A server not in recovery is a primary (or a copy behind a pooler): 0.
LAG = """
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN 0.0::float8
            WHEN NOT EXISTS (SELECT FROM pg_stat_wal_receiver) THEN NULL
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0::float8
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
       END,
       EXISTS (SELECT FROM pg_stat_wal_receiver)
"""


@dataclass(frozen=True)
class Lag:
    """What the replica says of itself: whether it is one (in recovery), whether it streams
    from its primary, and how many seconds behind it is (None: it cannot tell)."""

    in_recovery: bool
    seconds: float | None
    streaming: bool


def lag_steps() -> Steps[Lag]:
    """How far behind the server this connection is on is (see ``LAG``)."""
    row = yield Run(LAG, None, "one")
    return Lag(bool(row[0]), None if row[1] is None else float(row[1]), bool(row[2]))


lag, lag_sync = dual(lag_steps)
