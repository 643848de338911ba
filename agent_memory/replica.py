"""Reads on a PostgreSQL streaming replica (``AGENT_MEMORY_READ_DATABASE_URL``).

Inject, search and conversation search read there; every write goes to the primary
(``DATABASE_URL``), including the one an inject makes after reading: the facts it used are
reinforced (their decay clocks restarted, see `agent_memory.db.recall.refresh_steps`) in a
short statement of their own on the primary, as part of the same call. It is not skipped, so
memory decays the same with a replica as without one; the statement computes from the
primary's rows (once per fact and day), so nothing read on a replica that lags is written back.

A read goes to the replica only while it keeps up. How far behind it is, it is asked (on the
replica, see `agent_memory.db.replica`) by one read in ``AGENT_MEMORY_READ_LAG_CHECK_SECONDS``;
the others go where that answer sent them. Further behind than
``AGENT_MEMORY_READ_MAX_LAG_SECONDS``, or not streaming from its primary, the reads go to the
primary until a later check finds it caught up. A replica that fails (cannot be reached, does not
answer within ``AGENT_MEMORY_READ_TIMEOUT_SECONDS``, or fails a statement) costs the read that
found out at most that deadline: the read is made again on the primary, and the replica is left
alone for `DOWN_RETRY_S` (or the check interval, if longer). Each episode (lagging, failing)
is logged once when it starts and once when it ends, not on every read.

What it does not do: read your own writes. A fact added a moment ago (``add_fact``, the
``remember`` tool), an episode recorded by the previous turn, or consolidation's latest facts may
be missing from an inject for as long as the replica is behind (at most the bound, plus a check
interval).

Where each read goes is `agent_memory.reads.Reads`'s to decide.
"""

from __future__ import annotations

import logging
import threading
from time import monotonic
from typing import Literal

from agent_memory.db.connection import Database
from agent_memory.db.pool import Pools
from agent_memory.db.replica import Lag
from agent_memory.redact import describe, known_secrets
from agent_memory.settings import DatabaseSettings

log = logging.getLogger(__name__)

# a replica that failed is tried again after this long: a dead one costs one read's deadline
# in this time, not one per read; one back in service takes the reads again within it
DOWN_RETRY_S = 5.0

State = Literal["unknown", "ok", "lagging", "down"]


class Replica:
    """A read replica: its pools, and whether reads may go there now."""

    def __init__(self, settings: DatabaseSettings) -> None:
        assert settings.read_url is not None
        self.database = Database(
            dsn=settings.read_url.get_secret_value(), embedded=False, settings=settings
        )
        self.deadline = settings.read_timeout
        self.max_lag = settings.read_max_lag
        self._every = settings.read_lag_check
        # the server cancels a statement past the deadline too: a sync read has no other bound
        self.pools = Pools(
            self.database,
            name="agent-memory-read",
            wait=False,
            timeout_ms=max(1, round(self.deadline * 1000)),
            close_timeout=self.deadline,
        )
        self._lock = threading.Lock()
        self._next_check = 0.0  # monotonic
        self._state: State = "unknown"  # no read goes there before a check says it may

    @property
    def state(self) -> State:
        return self._state

    def route(self) -> Literal["replica", "check", "primary"]:
        """Where the next read goes: ``check`` means to the replica once it says how far
        behind it is (this caller asks; the others meanwhile go where the last answer said)."""
        with self._lock:
            now = monotonic()
            if now >= self._next_check:
                self._next_check = now + self._every
                return "check"
            return "replica" if self._state == "ok" else "primary"

    def judge(self, lag: Lag) -> bool:
        """Record what the replica said of its lag; True when reads may go there."""
        if lag.seconds is not None and lag.seconds <= self.max_lag:
            self._become("ok", "")
            return True
        if lag.seconds is not None:
            reason = f"it is {lag.seconds:.1f} s behind its primary"
        elif not lag.streaming:
            reason = "it is not streaming from its primary, so how far behind is unknown"
        else:
            reason = "it is behind its primary and has replayed nothing since it started"
        self._become("lagging", f"{reason} (AGENT_MEMORY_READ_MAX_LAG_SECONDS={self.max_lag:g})")
        return False

    def failed(self, exc: BaseException) -> None:
        """The replica failed a read (connection, deadline or statement): leave it alone for a
        while."""
        retry = max(self._every, DOWN_RETRY_S)
        with self._lock:
            self._next_check = monotonic() + retry
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {self.deadline:g} s (AGENT_MEMORY_READ_TIMEOUT_SECONDS)"
        else:
            reason = describe(exc, known_secrets(self.database.dsn))
        self._become("down", f"{reason}; tried again in {retry:g} s")

    def _become(self, state: State, reason: str) -> None:
        with self._lock:
            before, self._state = self._state, state
        if state == before:
            return
        where = self.database.display
        if state == "ok":
            log.info("read replica %s keeps up: reads go there", where)
        else:
            log.warning("read replica %s: %s. Reads go to the primary meanwhile", where, reason)
