"""Scoring for the recall benchmark (benchmarks/recall.py): which turn each fact and each
indexed message stands for, where inject put a question's answer, and the figures per ranking
(recall@k, MRR, tokens, inject p50/p95, dates, changed answers)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

import psycopg

from benchmarks import recall_set
from benchmarks._common import percentile

KS = (5, 10, 20)

SOURCES = """
SELECT s.fact_id, e.messages, e.metadata -> 'turn_ids'
FROM agent_memory.fact_sources s JOIN agent_memory.episodes e ON e.id = s.episode_id
"""


def fact_turns(conn: psycopg.Connection[Any], mode: str) -> dict[int, str]:
    """The turn each current fact stands for (see the module)."""
    facts = dict(
        conn.execute(
            "SELECT id, content FROM agent_memory.memory_items WHERE superseded_at IS NULL"
        ).fetchall()
    )
    out: dict[int, str] = {}
    best: dict[int, float] = {}
    for fact_id, messages, turn_ids in conn.execute(SOURCES):
        if fact_id not in facts:
            continue
        words = recall_set.content_words(facts[fact_id])
        for message, turn_id in zip(messages, turn_ids or [], strict=False):
            text = str(message.get("content", ""))
            if mode == "turns":
                score = 1.0 if text.strip() == facts[fact_id].strip() else 0.0
            else:
                theirs = recall_set.content_words(text)
                score = len(words & theirs) / (len(words | theirs) or 1)
                # what the user said is the source of a fact about them: the assistant's
                # restatement of it (shorter, so often closer in words) comes second
                score *= 1.0 if message.get("role") == "user" else _RESTATEMENT
            if score > best.get(fact_id, 0.0):
                best[fact_id], out[fact_id] = score, turn_id
    return out


_RESTATEMENT = 0.5


SNIPPET_TURNS = """
SELECT s.episode_id, s.position, e.metadata -> 'turn_ids' ->> s.position
FROM agent_memory.snippets s JOIN agent_memory.episodes e ON e.id = s.episode_id
"""


def snippet_turns(conn: psycopg.Connection[Any]) -> dict[tuple[int, int], str]:
    """The turn each message of a past conversation is."""
    return {(e, p): t for e, p, t in conn.execute(SNIPPET_TURNS) if t is not None}


def injected_turns(
    frame: Any, turns: dict[int, str], snippets: dict[tuple[int, int], str]
) -> list[str | None]:
    """The turns a frame injected, in order of relevance: its facts and its snippets merged by
    score (both are relevance scaled by the prior)."""
    items = [(score, turns.get(f)) for f, score in zip(frame.fact_ids, frame.scores, strict=False)]
    items += [(s.score, snippets.get((s.episode_id, s.position))) for s in frame.snippets]
    return [turn for _, turn in sorted(items, key=lambda item: -item[0])]


def turn_rank(injected: list[str | None], answers: set[str]) -> int | None:
    for position, turn in enumerate(injected, start=1):
        if turn in answers:
            return position
    return None


def turn_dated(
    frame: Any, turns: dict[int, str], answers: set[str], said_on: dict[str, str]
) -> bool | None:
    """Whether the first injected fact standing for an answer carries its conversation's date
    (None when no such fact was injected)."""
    for position, fact_id in enumerate(frame.fact_ids):
        turn = turns.get(fact_id)
        if turn in answers:
            phrase = frame.fact_dates[position] if frame.fact_dates else ""
            return phrase.endswith(said_on[turn])
    return None


def dated(rows: list[dict[str, Any]]) -> float | None:
    """Of the questions whose answer was injected as a fact, the share where that fact said the
    date of its conversation (AGENT_MEMORY_INJECT_DATES)."""
    found = [r["dated"] for r in rows if r.get("dated") is not None]
    return round(sum(found) / len(found), 3) if found else None


def changed(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """For the questions whose answer changed (those naming what it was before): the share for
    which inject gives the current answer (among the facts or the snippets) and no fact
    standing for a superseded turn (a snippet is a dated message of the past, not a claim),
    and the share that gives a superseded one as a fact."""
    asked = [r for r in rows if r.get("stale") is not None]
    if not asked:
        return None
    return {
        "questions": len(asked),
        "current_not_stale": round(
            sum(1 for r in asked if r["rank"] is not None and not r["stale"]) / len(asked), 3
        ),
        "stale": round(sum(1 for r in asked if r["stale"]) / len(asked), 3),
    }


def _figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ranks = [r["rank"] for r in rows]
    ms = [r["ms"] for r in rows]
    return {
        "questions": len(rows),
        **{
            f"recall@{k}": round(sum(1 for x in ranks if x is not None and x <= k) / len(rows), 3)
            for k in KS
        },
        "mrr": round(statistics.fmean(1 / x if x else 0.0 for x in ranks), 3),
        "tokens_per_question": round(statistics.fmean(r["tokens"] for r in rows), 1),
        "inject_p50_ms": round(percentile(ms, 0.50), 3),
        "inject_p95_ms": round(percentile(ms, 0.95), 3),
        "answer_fact_dated": dated(rows),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_category[r["category"]].append(r)
    return {
        "overall": _figures(rows),
        "by_category": {c: _figures(rs) for c, rs in sorted(by_category.items())},
        "changed_answers": changed(rows),
    }
