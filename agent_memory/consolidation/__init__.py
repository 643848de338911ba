"""Consolidation: turning a scope's pending episodes into facts, top-down.

A run (a Prefect flow, ``agent_memory_flows.consolidation``) finds the scopes with pending
episodes and hands them to the runner, which works group by group; each group goes through the
steps once per round for all of its scopes, and every scope keeps its own batch, job row and
outcome. One file per part:

* ``runner.py``  - claim a group's scopes, run rounds of load -> extract -> write (then record
  the failures), embed the new facts; over the :class:`~runner.Steps` protocol (in Prefect:
  a task run per step and group, ``agent_memory_flows.run``; or :class:`~runner.DirectSteps`)
* ``groups.py``  - a step for all of a group's members at once, each member keeping its error;
  what a retry redoes
* ``claims.py``  - one run per scope at a time (row locks tenants cannot take)
* ``load.py``    - step 1: a scope's next batch of pending episodes, checksummed, a job row
* ``extract.py`` - step 2: the batch's operations, from the cache or the model
* ``write.py``   - step 3: facts, episode marks and summaries, the job's status, one transaction
* ``fail.py``    - a failed step: the job row says why, the failure streak sets the backoff
* ``embed.py``   - the new facts' and messages' vectors
* ``results.py`` - a result per scope, and the run's summary

Their SQL is in ``agent_memory/db/`` (``episodes``, ``jobs``, ``facts``, ``extractions``,
``claims``, ``retries``); the Prefect tasks in ``agent_memory_tasks.consolidation`` are thin
wrappers over ``groups``, ``embed`` and ``load``.

Guarantees:

* one run per scope at a time: a run *claims* a scope with a row lock, held by a transaction on
  a connection of its own (:class:`ScopeClaims`), that tenants cannot take. Another run skips
  the scope (``busy``). If the owner dies, PostgreSQL drops its lock with its connection, and
  the next run takes the scope over, failing the job the dead run left ``running`` (no timeout
  to wait for);
* the LLM is called outside any database transaction, and its answer is cached by checksum,
  extractor and prompt version before anything else is written, so a retry or a rerun after a
  crash never pays for the same content twice;
* a scope's writes (facts with their sources, episode marks, job status and cost) commit in one
  transaction, and only episodes still pending are marked: an episode is consolidated once.
"""

from agent_memory.consolidation.claims import ScopeClaims
from agent_memory.consolidation.load import ScopeBatch
from agent_memory.consolidation.results import Outcome, RunSummary, ScopeResult, run_summary

__all__ = ["Outcome", "RunSummary", "ScopeBatch", "ScopeClaims", "ScopeResult", "run_summary"]
