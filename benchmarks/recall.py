"""python -m benchmarks.recall [--dataset FILE] [--mode turns|facts] [--quick] [--out FILE]

What inject gives back, measured on dated multi-session conversations (docs/evaluation.md has
the format; the default is the set written for this project, benchmarks/recall_set.py). The
data goes through the real paths: each session is imported as an episode (``backfill``'s
``import_jsonl``), consolidated by the Prefect consolidation flow (which embeds the facts with
the configured model, the bundled one by default), then every question is asked through
``MemoryManager.inject`` on the day it is asked, once per ranking.

* ``--mode turns``: every turn becomes a fact, through a loopback LLM that answers one ``add``
  per turn, so the ranking alone decides what inject returns;
* ``--mode facts``: the configured extractor makes the facts (the offline one by default).

A question is answered at k when a turn it names is among the first k injected facts: in turns
mode the fact is the turn; in facts mode a fact stands for the turn of its source episodes whose
words it shares most. Reported per ranking, overall and per category: recall@5/10/20, MRR (of
the first answering fact within 20), tokens injected per question (the frame's text, four
characters a token) and inject p50/p95 in ms, the question's embedding included.

On the built-in set in turns mode the run fails (``"pass": false``, exit status 1) when a
figure falls below its floor in ``benchmarks/recall_floors.json`` (``below_floors`` in the JSON
names each), at either size, so the smoke run catches a ranking that got worse; at full size
also when the default inject's recall@10 is below issue 36's 0.85.

Decay is not what is measured here: inject reads every fact whatever its faded importance
(``inject_min_importance`` at its floor), so a set whose sessions lie years back ranks the same.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from benchmarks._common import prefect_defaults

os.environ.update(prefect_defaults(root_logger=False, own_home=False))

import psycopg
from pydantic import SecretStr

from agent_memory import token_estimate
from agent_memory.errors import BackfillError
from agent_memory.extraction.parse import MAX_FACTS
from agent_memory.settings import DatabaseSettings, LLMSettings, MemorySettings, Settings
from benchmarks import recall_set
from benchmarks._common import bench_database, emit, parser, prefect_server
from benchmarks._recall_dataset import AGENT, episodes_jsonl, load_dataset, read_dataset
from benchmarks._recall_floors import FLOORS, below_floors, meets_bounds
from benchmarks._recall_llm import every_turn, oracle
from benchmarks._recall_prepare import MAX_SESSION_TURNS
from benchmarks._recall_score import (
    KS,
    Answer,
    Turn,
    fact_turns,
    injected,
    snippet_turns,
    summarise,
    superseded,
    table,
    turn_dated,
    turn_texts,
)

# what other code (tests) takes from here
__all__ = [
    "FLOORS",
    "RANKINGS",
    "below_floors",
    "evaluate",
    "every_turn",
    "main",
    "meets_bounds",
    "oracle",
    "read_dataset",
]

# each ranking a label and the memory settings it overrides; the hybrid under both fusions and
# without each of its guards on meaning, so one run says what each choice is worth
_FACTS_ONLY = {"inject_snippets_tokens": 0}
RANKINGS: dict[str, dict[str, Any]] = {
    "importance": {"inject_ranking": "importance", **_FACTS_ONLY},
    "text": {"inject_ranking": "text", **_FACTS_ONLY},
    "vector": {"inject_ranking": "vector", **_FACTS_ONLY},
    "hybrid": {"inject_ranking": "hybrid", **_FACTS_ONLY},
    "hybrid_rrf": {"inject_ranking": "hybrid", "inject_fusion": "rrf", **_FACTS_ONLY},
    "hybrid_relative": {"inject_ranking": "hybrid", "inject_fusion": "relative", **_FACTS_ONLY},
    "hybrid_ungated": {"inject_ranking": "hybrid", "inject_text_gate": False, **_FACTS_ONLY},
    "hybrid_unfloored": {"inject_ranking": "hybrid", "inject_vector_floor": False, **_FACTS_ONLY},
    # the default: facts, then the past messages they do not cover, within the token budget
    "hybrid_snippets": {"inject_ranking": "hybrid"},
    # the default without a question's reply shown with it
    "hybrid_snippets_no_replies": {"inject_ranking": "hybrid", "inject_snippet_replies": False},
}
DB_NAME = "agent_memory_recall"
# conversation per call of the loopback models: small enough that a call's answer (a fact per
# turn) stays under the pipeline's cap on the facts of one answer (extraction.parse.MAX_FACTS)
TURNS_BATCH_TOKENS = 2000
# and, however short their turns (a batch of "ok"s holds hundreds in that budget), no more
# sessions than that cap holds at their longest (_recall_prepare.MAX_SESSION_TURNS); turns mode
BATCH_SESSIONS = MAX_FACTS // MAX_SESSION_TURNS

# ---- the run ------------------------------------------------------------------------------


async def consolidate_all(
    settings: Settings, conn: psycopg.Connection[Any], batch_sessions: int | None = None
) -> int:
    """Run the consolidation flow until no episode is pending, each batch of at most
    ``batch_sessions`` sessions (None: as the flow's defaults have it); how many runs it took."""
    from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
    from agent_memory_flows.outcome import run_for_summary

    for run in range(1, 50):
        params = ConsolidationParams()
        if batch_sessions is not None:
            params = ConsolidationParams(max_episodes_per_scope=batch_sessions)
        summary = await run_for_summary(consolidation_flow, params)
        if summary.get("failed"):
            raise RuntimeError(f"consolidation failed: {summary}")
        pending = conn.execute(
            "SELECT count(*) FROM agent_memory.episodes WHERE NOT consolidated"
        ).fetchone()
        if pending == (0,):
            return run
    raise RuntimeError("episodes still pending after 49 consolidation runs")


async def ask_all(
    settings: Settings,
    conversations: list[dict[str, Any]],
    facts: dict[int, set[Turn]],
    snippets: dict[tuple[int, int], Turn],
    rankings: dict[str, dict[str, Any]] = RANKINGS,
) -> dict[str, Any]:
    from agent_memory.manager import MemoryManager
    from agent_memory.models import Scope

    texts = turn_texts(conversations)
    # the day memory dates a fact (inject's dates are in UTC), not the session's local one
    said_on = {
        (c["id"], t["id"]): datetime.fromisoformat(s["date"]).astimezone(UTC).date().isoformat()
        for c in conversations
        for s in c["sessions"]
        for t in s["turns"]
    }
    results: dict[str, Any] = {}
    for ranking, overrides in rankings.items():
        memory = MemorySettings(
            **{
                **settings.memory.model_dump(),
                "inject_min_importance": 0.0,
                "inject_limit": max(KS),
                **overrides,
            }
        )
        manager = await MemoryManager.create(
            settings=settings.model_copy(update={"memory": memory}), migrate=False
        )
        rows = []
        try:
            for c in conversations:
                scope = Scope(c["id"], AGENT)
                for q in c["questions"]:
                    answer = Answer(c["id"], q, texts)
                    started = time.perf_counter()
                    frame = await manager.inject(
                        scope, query=q["question"], on=date.fromisoformat(q["asked"][:10])
                    )
                    ms = (time.perf_counter() - started) * 1000
                    items = injected(frame, facts, snippets)
                    stale = superseded(c["id"], q, texts)
                    rows.append(
                        {
                            "category": q["category"],
                            "rank": answer.rank(items),
                            "message_rank": answer.rank(items, whole_message=True),
                            "inferred": answer.inferred,
                            "stale": None if stale is None else stale.given(frame, facts),
                            "dated": turn_dated(frame, facts, answer, said_on),
                            "ms": ms,
                            "tokens": token_estimate.tokens(frame.context),
                        }
                    )
        finally:
            await manager.close()
        results[ranking] = summarise(rows)
    return results


# the reference of issue 54: full text as PostgreSQL's language-neutral `simple` parses it (no
# stemming, no stop words, a run of Chinese or Japanese characters one word), every stored text
# parsed again by it, and the rankings that read full text asked again
SIMPLE_RANKINGS = {name: RANKINGS[name] for name in ("text", "hybrid_snippets")}
_AS_SIMPLE = [
    "CREATE OR REPLACE FUNCTION agent_memory.search_vector(t text) RETURNS tsvector"
    " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE RETURN to_tsvector('simple'::regconfig, t)",
    "UPDATE agent_memory.memory_items SET content = content",
    "UPDATE agent_memory.snippets SET content = content",
    "SELECT agent_memory.recount_terms('f'), agent_memory.recount_terms('s')",
]


async def ask_with_simple_reference(
    settings: Settings,
    conversations: list[dict[str, Any]],
    facts: dict[int, set[Turn]],
    snippets: dict[tuple[int, int], Turn],
    rankings: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """:func:`ask_all`, then the same memory parsed as `simple` and asked again by the
    rankings of :data:`SIMPLE_RANKINGS` (``text_simple``, ``hybrid_snippets_simple``). The
    database is the run's own: its parsing is not restored."""
    results = await ask_all(settings, conversations, facts, snippets, rankings)
    dsn = settings.db.url.get_secret_value() if settings.db.url else ""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in _AS_SIMPLE:
            conn.execute(statement)
    simple = await ask_all(settings, conversations, facts, snippets, SIMPLE_RANKINGS)
    return {**results, **{f"{name}_simple": r for name, r in simple.items()}}


# how a run asks its questions once memory holds the conversations: (settings, conversations,
# the turns each fact stands for, the turn of each message, the rankings) -> figures per ranking
Ask = Callable[
    [
        Settings,
        list[dict[str, Any]],
        dict[int, set[Turn]],
        dict[tuple[int, int], Turn],
        dict[str, dict[str, Any]],
    ],
    Awaitable[dict[str, Any]],
]


async def evaluate(
    settings: Settings,
    conversations: list[dict[str, Any]],
    mode: str,
    workdir: Path,
    rankings: dict[str, dict[str, Any]] = RANKINGS,
    ask: Ask = ask_all,
) -> dict[str, Any]:
    """Import, consolidate and ask, on the database of ``settings`` (a fresh one), once per
    ranking of ``rankings`` (a label and the memory settings it overrides); ``ask`` asks
    (:func:`ask_all` unless another measures something else, as benchmarks.ablations does)."""
    from agent_memory.backfill import import_jsonl
    from agent_memory.settings import use_settings

    dsn = settings.db.url.get_secret_value() if settings.db.url else ""
    use_settings(settings)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            started = time.perf_counter()
            report = import_jsonl(conn, episodes_jsonl(conversations, workdir / "episodes.jsonl"))
            # in facts mode, a model's answers are what is measured, batches as a user's
            runs = await consolidate_all(
                settings, conn, BATCH_SESSIONS if mode == "turns" else None
            )
            load_s = time.perf_counter() - started
            turns = fact_turns(conn, mode, conversations)
            messages = snippet_turns(conn)
            facts = conn.execute("SELECT count(*) FROM agent_memory.memory_items").fetchone()
        results = await ask(settings, conversations, turns, messages, rankings)
    finally:
        use_settings(None)
    first = next(iter(results.values()), {"overall": {"inferred": 0.0}})
    return {
        "mode": mode,
        "conversations": len(conversations),
        "sessions": report.inserted,
        # a session imported before (its id, or its time and messages, in that scope)
        "sessions_already_there": report.duplicates,
        "questions": sum(len(c["questions"]) for c in conversations),
        "facts": facts[0] if facts else 0,
        "facts_mapped_to_turns": len(turns),
        "messages_indexed": len(messages),
        "embedding_model": settings.embedding.active_model,
        "extractor": settings.llm.model or "offline-rules",
        "load_and_consolidate_s": round(load_s, 1),
        "consolidation_runs": runs,
        "fusion": settings.memory.inject_fusion,  # what "hybrid" used
        "inferred": first["overall"]["inferred"],
        "rankings": results,
    }


def measure(
    conversations: list[dict[str, Any]],
    mode: str = "turns",
    extractor: str = "turns",
    rankings: dict[str, dict[str, Any]] = RANKINGS,
    ask: Ask = ask_all,
) -> dict[str, Any]:
    """One run of :func:`evaluate` on a database of its own and the Prefect server of
    :func:`benchmarks._common.prefect_server` (one a process: Prefect's client keeps the
    first server it is given); the facts
    made by ``extractor``: ``turns`` (a loopback model that keeps every turn), ``oracle`` (one
    that knows the answers) or ``configured`` (the settings' extractor, offline by default)."""
    from tests.fake_llm import FakeLLM

    answer = {"turns": every_turn, "oracle": oracle}.get(extractor)
    with bench_database(DB_NAME) as (_admin, dsn):
        llm = FakeLLM().start() if answer is not None else None
        try:
            base = Settings()
            if llm is not None and answer is not None:
                llm.reset(answer(conversations))
                name = "every-turn" if extractor == "turns" else "oracle"
                base = base.model_copy(
                    update={
                        "llm": LLMSettings(
                            model=f"openai/{name}",
                            api_base=llm.api_base,
                            api_key=SecretStr("x"),
                            batch_tokens=TURNS_BATCH_TOKENS,
                        )
                    }
                )
            settings = base.model_copy(update={"db": DatabaseSettings(url=SecretStr(dsn))})
            with tempfile.TemporaryDirectory(prefix="am-recall-") as work:
                return asyncio.run(
                    evaluate(settings, conversations, mode, Path(work), rankings, ask)
                )
        finally:
            if llm is not None:
                llm.stop()


def main(argv: list[str] | None = None) -> int:
    cli = parser("recall", __doc__, quick="the first two conversations")
    cli.add_argument("--dataset", type=Path, help="JSON Lines (default: the built-in set)")
    cli.add_argument("--mode", choices=("turns", "facts"), default="turns")
    cli.add_argument(
        "--extractor",
        choices=("configured", "oracle"),
        default="configured",
        help="facts mode: the configured extractor, or a loopback model that knows the answers "
        "and updates what changed (what the pipeline does with a model's operations)",
    )
    cli.add_argument("--out", type=Path, help="also write the JSON here")
    cli.add_argument(
        "--simple-reference",
        action="store_true",
        help="also ask the full-text rankings with every text parsed as PostgreSQL's "
        "language-neutral `simple` (text_simple, hybrid_snippets_simple): the reference for "
        "memory in other languages",
    )
    cli.add_argument("--write-dataset", type=Path, help="write the built-in set and exit")
    args = cli.parse_args(argv)
    if args.write_dataset:
        print(recall_set.write(args.write_dataset))
        return 0
    try:
        conversations, handled = load_dataset(args.dataset)
    except BackfillError as exc:  # what cannot be read, named in one line, before any setup
        print(f"benchmarks.recall: {exc}", file=sys.stderr)
        return 2
    if args.quick:
        conversations = conversations[:2]

    with prefect_server():
        result = measure(
            conversations,
            args.mode,
            "turns" if args.mode == "turns" else args.extractor,
            ask=ask_with_simple_reference if args.simple_reference else ask_all,
        )
    result["dataset"] = handled
    result["pass"] = None
    if not args.dataset and args.mode == "turns":
        below = below_floors(result, "quick" if args.quick else "full")
        result["below_floors"] = below
        result["pass"] = not below and (args.quick or meets_bounds(result))
    elif not args.dataset and not args.quick:
        result["pass"] = meets_bounds(result)
    print(table(result) + "\n")  # before the JSON, which python -m benchmarks reads from its "{"
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
