"""Scoring for the recall benchmark (benchmarks/recall.py): which turns each fact and each
indexed message stand for, where inject put a question's answer, and the figures per ranking
(recall@k, MRR, tokens, inject p50/p95, dates, changed answers) with a readable table.

A turn is ``(conversation id, turn id)``: turn ids are unique only within a conversation.

An injected item (a fact or a snippet) *stands for* a turn: in turns mode a fact is the whole
turn, attributed ("Speaker: text", normalised as the pipeline normalises a fact, or cut as the
pipeline cuts one past its length limit), and every turn of the conversation with that text;
in facts mode a fact stands for the turn of its source episodes whose words it shares most; a
snippet stands for the message it is a sentence of, and for the reply shown with it (a
question's), whose words count as its own.

An item *holds* a question's answer (sentence-level credit, what ``recall@k`` counts) when it
stands for an answering turn and its own text says the answer: at least half (rounded up) of
the answer's content words that the answering turn itself says (stems, stop words left out;
:func:`benchmarks.recall_set.content_words`). An answer that its turn does not say in words (a
date worked out from "last Saturday", a "yes" inferred from a story) is held by every item of
that turn, since no one sentence of it can be told apart; the share of such questions is
reported as ``inferred``. A question with no ``answer`` text is likewise held by every item of
an answering turn. ``message_recall@k`` counts every item of an answering turn (whole-message
credit), so the two can be compared.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import psycopg

from benchmarks import recall_set
from benchmarks._common import percentile
from benchmarks._recall_llm import attributed

KS = (1, 5, 10, 20)

Turn = tuple[str, str]  # conversation id, turn id

SOURCES = """
SELECT s.fact_id, e.user_id, e.messages, e.metadata -> 'turn_ids'
FROM agent_memory.fact_sources s JOIN agent_memory.episodes e ON e.id = s.episode_id
"""
CURRENT_FACTS = """
SELECT id, user_id, content FROM agent_memory.memory_items WHERE superseded_at IS NULL
"""


def normalised(text: str) -> str:
    """A text as the pipeline stores a fact of it: white space collapsed."""
    return " ".join(text.split())


def _is_turn(fact: str, turn: str) -> bool:
    """The fact is the whole turn, or the turn cut at the fact length limit ("...")."""
    return fact == turn or (fact.endswith("...") and turn.startswith(fact[:-3]))


def turn_texts(conversations: list[dict[str, Any]]) -> dict[Turn, str]:
    return {
        (c["id"], t["id"]): t["text"]
        for c in conversations
        for s in c["sessions"]
        for t in s["turns"]
    }


def fact_turns(
    conn: psycopg.Connection[Any], mode: str, conversations: list[dict[str, Any]]
) -> dict[int, set[Turn]]:
    """The turns each current fact stands for (see the module). In turns mode every turn must
    be some fact: a turn none stands for stops the run (the data broke an assumption of the
    harness, which would otherwise score it low)."""
    if mode == "turns":
        return _whole_turn_facts(conn, conversations)
    facts = {fact_id: content for fact_id, _, content in conn.execute(CURRENT_FACTS)}
    out: dict[int, set[Turn]] = {}
    best: dict[int, float] = {}
    for fact_id, cid, messages, turn_ids in conn.execute(SOURCES):
        if fact_id not in facts:
            continue
        words = recall_set.content_words(facts[fact_id])
        for message, turn_id in zip(messages, turn_ids or [], strict=False):
            theirs = recall_set.content_words(str(message.get("content", "")))
            score = len(words & theirs) / (len(words | theirs) or 1)
            # what the user said is the source of a fact about them: the assistant's
            # restatement of it (shorter, so often closer in words) comes second
            score *= 1.0 if message.get("role") == "user" else _RESTATEMENT
            if score > best.get(fact_id, 0.0):
                best[fact_id], out[fact_id] = score, {(cid, turn_id)}
    return out


_RESTATEMENT = 0.5


def _whole_turn_facts(
    conn: psycopg.Connection[Any], conversations: list[dict[str, Any]]
) -> dict[int, set[Turn]]:
    by_text: dict[str, dict[str, list[Turn]]] = defaultdict(lambda: defaultdict(list))
    for c in conversations:
        for t in (t for s in c["sessions"] for t in s["turns"]):
            by_text[c["id"]][normalised(attributed(t))].append((c["id"], t["id"]))
    out: dict[int, set[Turn]] = {}
    for fact_id, cid, content in conn.execute(CURRENT_FACTS):
        texts = by_text.get(cid, {})
        turns = texts.get(content) or next(
            (ts for text, ts in texts.items() if _is_turn(content, text)), None
        )
        if turns:
            out[fact_id] = set(turns)
    covered = set().union(*out.values()) if out else set()
    missing = [t for c in by_text.values() for ts in c.values() for t in ts if t not in covered]
    if missing:
        raise ValueError(
            f"turns mode: {len(missing)} turns became no fact, e.g. {missing[:3]}; "
            "every turn must be stored whole for the ranking alone to decide"
        )
    return out


SNIPPET_TURNS = """
SELECT s.episode_id, s.position, e.user_id, e.metadata -> 'turn_ids' ->> s.position
FROM agent_memory.snippets s JOIN agent_memory.episodes e ON e.id = s.episode_id
"""


def snippet_turns(conn: psycopg.Connection[Any]) -> dict[tuple[int, int], Turn]:
    """The turn each message of a past conversation is."""
    return {(e, p): (c, t) for e, p, c, t in conn.execute(SNIPPET_TURNS) if t is not None}


# an injected item: the turns it stands for and its own text
Item = tuple[set[Turn], str]


def injected(
    frame: Any, facts: dict[int, set[Turn]], snippets: dict[tuple[int, int], Turn]
) -> list[Item]:
    """What a frame injected, in order of relevance: its facts and its snippets merged by score
    (both are relevance scaled by the prior). A ranking that gives no scores (importance)
    ranks its facts in their order, ahead of any snippet."""
    none: set[Turn] = set()
    if not frame.scores:
        ranked = [
            (facts.get(f, none), c)
            for f, c in zip(frame.fact_ids, frame.injected_facts, strict=True)
        ]
        return ranked + [(_one(snippets, s), _text(s)) for s in frame.snippets]
    items = [
        (score, facts.get(f, none), content)
        for f, content, score in zip(
            frame.fact_ids, frame.injected_facts, frame.scores, strict=True
        )
    ]
    items += [(s.score, _one(snippets, s), _text(s)) for s in frame.snippets]
    return [(turns, text) for _, turns, text in sorted(items, key=lambda item: -item[0])]


def _one(snippets: dict[tuple[int, int], Turn], snippet: Any) -> set[Turn]:
    """The turns a snippet stands for: its message's, and its reply's when it has one."""
    positions = [snippet.position]
    if getattr(snippet, "reply", None) is not None:
        positions.append(snippet.reply.position)
    found = (snippets.get((snippet.episode_id, p)) for p in positions)
    return {turn for turn in found if turn is not None}


def _text(snippet: Any) -> str:
    reply = getattr(snippet, "reply", None)
    return f"{snippet.content} {reply.content}" if reply is not None else str(snippet.content)


class Answer:
    """What answers one question: its turns, and the words of its answer each of them says."""

    def __init__(self, cid: str, question: dict[str, Any], texts: dict[Turn, str]) -> None:
        self.turns = {(cid, a) for a in question["answers"]}
        words = recall_set.content_words(question.get("answer", ""))
        # per answering turn: the answer's words it says (empty: it says none, or no answer)
        self.said = {t: words & recall_set.content_words(texts[t]) for t in self.turns}
        self.inferred = not any(self.said.values())

    def held_by(self, item: Item) -> bool:
        """Sentence-level credit: the item stands for an answering turn and says the answer."""
        turns, text = item
        for turn in turns & self.turns:
            said = self.said[turn]
            if not said or len(said & recall_set.content_words(text)) >= math.ceil(len(said) / 2):
                return True
        return False

    def rank(self, items: list[Item], whole_message: bool = False) -> int | None:
        """Where the first item holding the answer (or, ``whole_message``, standing for an
        answering turn) was injected, from 1; None when none was."""
        for position, item in enumerate(items, start=1):
            if (item[0] & self.turns) if whole_message else self.held_by(item):
                return position
        return None


class Stale:
    """What a changed question's answer used to be: its superseded turns, and (when the data
    says it, ``superseded_answer``) the old answer's words."""

    def __init__(self, old: Answer, by_words: bool) -> None:
        self.old = old
        self.by_words = by_words

    def given(self, frame: Any, facts: dict[int, set[Turn]]) -> bool:
        """Whether a fact the frame injected gives the old answer as current: a fact standing
        for a superseded turn that says the old answer (a snippet is a dated message of the
        past, not a claim). Without the old answer's words, any fact standing for a superseded
        turn counts, which in facts mode also counts another fact of the same message."""
        none: set[Turn] = set()
        for fact_id, content in zip(frame.fact_ids, frame.injected_facts, strict=True):
            turns = facts.get(fact_id, none)
            if self.old.held_by((turns, content)) if self.by_words else turns & self.old.turns:
                return True
        return False


def superseded(cid: str, question: dict[str, Any], texts: dict[Turn, str]) -> Stale | None:
    """The old answer of a question naming ``superseded`` turns (None when it names none)."""
    if not question.get("superseded"):
        return None
    before = {"answers": question["superseded"], "answer": question.get("superseded_answer", "")}
    return Stale(Answer(cid, before, texts), by_words="superseded_answer" in question)


def turn_dated(
    frame: Any, facts: dict[int, set[Turn]], answer: Answer, said_on: dict[Turn, str]
) -> bool | None:
    """Whether the first injected fact standing for an answer carries its conversation's date
    (None when no such fact was injected)."""
    for position, fact_id in enumerate(frame.fact_ids):
        found = facts.get(fact_id, set()) & answer.turns
        if found:
            phrase = frame.fact_dates[position] if frame.fact_dates else ""
            return any(phrase.endswith(said_on[t]) for t in found)
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


def _at(ranks: Iterable[int | None], k: int, n: int) -> float:
    return round(sum(1 for x in ranks if x is not None and x <= k) / n, 3)


def _figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ranks = [r["rank"] for r in rows]
    ms = [r["ms"] for r in rows]
    n = len(rows)
    return {
        "questions": n,
        **{f"recall@{k}": _at(ranks, k, n) for k in KS},
        **{f"message_recall@{k}": _at((r["message_rank"] for r in rows), k, n) for k in KS},
        "mrr": round(statistics.fmean(1 / x if x and x <= 20 else 0.0 for x in ranks), 3),
        "inferred": round(sum(1 for r in rows if r["inferred"]) / n, 3),
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


def table(result: dict[str, Any]) -> str:
    """The figures of a run as a plain-text table: one row per ranking, recall@k with
    sentence-level credit, whole-message credit at 10, MRR, tokens, inject p50, and recall@10
    per category."""
    rankings: dict[str, Any] = result["rankings"]
    categories = sorted({c for r in rankings.values() for c in r["by_category"]})
    head = ["ranking", "r@1", "r@5", "r@10", "r@20", "msg r@10", "mrr", "tokens", "p50 ms"]
    head += [f"{c} r@10" for c in categories]
    rows = [head]
    for name, r in rankings.items():
        o = r["overall"]
        row = [name] + [f"{o[f'recall@{k}']:.3f}" for k in KS]
        row += [f"{o['message_recall@10']:.3f}", f"{o['mrr']:.3f}"]
        row += [f"{o['tokens_per_question']:.0f}", f"{o['inject_p50_ms']:.2f}"]
        row += [
            f"{r['by_category'][c]['recall@10']:.3f}" if c in r["by_category"] else "-"
            for c in categories
        ]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                  enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    title = (
        f"{result['questions']} questions, {result['conversations']} conversations, "
        f"mode {result['mode']}, extractor {result['extractor']}, "
        f"answers inferred (not said in words) {result['inferred']:.3f}"
    )
    handled = result.get("dataset", {}).get("said")
    return "\n".join([title, *([f"data as it came: {handled}"] if handled else []), *lines])
