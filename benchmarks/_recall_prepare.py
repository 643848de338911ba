"""Data as it comes (issue 53, item 1): what real exports of conversations hold that the recall
harness would otherwise refuse or miscount, made into what the harness measures, each kind
counted for the run's summary (``dataset`` in its JSON), nothing dropped without a count.

What is handled, per conversation (the rest of the format is checked by
:func:`benchmarks._recall_dataset.check`, which refuses what cannot be read with one line):

* a turn with no text (empty, white space, null) is skipped, as it says nothing to remember;
  a session left with no turns is skipped with it;
* a turn whose text is a list of content parts (as chat APIs send them) is one text: its text
  parts joined, any other part named in brackets (``[image_url]``);
* characters a database or a fact cannot hold are cleaned as the pipeline cleans them (NUL and
  lone surrogates become U+FFFD, other control characters are removed), so that a turn is the
  text memory stores;
* a session that repeats an earlier session of the same conversation turn for turn is stored
  once: a question naming a turn of the repeat names the same turn of the first;
* a session id used twice for different turns is made unique (``s1#2``);
* a session of more turns than one consolidation answer may write (the parser's limit) is
  split into parts of the same date, in order;
* a date without a time zone (or a bare day) is taken as UTC;
* a question whose answering turns were all skipped is dropped (it has nothing to find).

A session that repeats one of another conversation stays in both: each conversation is a
user's memory of its own.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from agent_memory.extraction.parse import MAX_FACTS
from agent_memory.messages import clean_text

# the turns of one episode: fewer than one consolidation answer may write (every turn is a fact
# in turns mode), with room for the facts an answer updates
MAX_SESSION_TURNS = MAX_FACTS // 2
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# what each count means, in the order the summary lists them
COUNTS = {
    "empty_turns_skipped": "turns with no text, skipped",
    "empty_sessions_skipped": "sessions left with no turns, skipped",
    "content_part_turns_joined": "turns of content parts, made one text",
    "turns_cleaned": "turns with characters memory cannot hold, cleaned",
    "repeated_sessions_stored_once": "sessions repeating an earlier one, stored once",
    "session_ids_made_unique": "session ids used twice, made unique",
    "long_sessions_split": "sessions too long for one consolidation answer, split",
    "dates_taken_as_utc": "dates without a time zone, taken as UTC",
    "questions_without_evidence_dropped": "questions whose answering turns had no text, dropped",
}


def summary(counts: Counter[str]) -> dict[str, Any]:
    """The counts for the run's JSON, and one line naming each that is not 0."""
    said = [f"{counts[k]} {what}" for k, what in COUNTS.items() if counts[k]]
    return {**{k: counts[k] for k in COUNTS}, "said": "; ".join(said) or "nothing to handle"}


def text_of(value: Any, counts: Counter[str]) -> str:
    """A turn's text as memory stores it (see the module); "" for none."""
    if isinstance(value, list):
        counts["content_part_turns_joined"] += 1
        parts = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
        value = "\n".join(p for p in parts if p)
    if not isinstance(value, str):
        return ""
    cleaned = _CONTROL.sub("", clean_text(value))
    if cleaned != value:
        counts["turns_cleaned"] += 1
    return cleaned


def session_date(value: str, counts: Counter[str]) -> str:
    """An ISO 8601 date with its time zone (UTC when it has none); unparseable stays as it is,
    for the check to refuse with its line."""
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return value
    if moment.tzinfo is None:
        counts["dates_taken_as_utc"] += 1
        return moment.replace(tzinfo=UTC).isoformat()
    return value


def prepare(conversation: Any, counts: Counter[str]) -> Any:
    """The conversation as the harness measures it (see the module); what is not a
    conversation is left for the check to refuse."""
    if not isinstance(conversation, dict) or not isinstance(conversation.get("sessions"), list):
        return conversation
    same: dict[str, str] = {}  # a repeated session's turn id -> the first one's
    kept: list[dict[str, Any]] = []
    seen: dict[tuple[tuple[str, str], ...], list[str]] = {}
    ids: Counter[str] = Counter()
    skipped: set[str] = set()
    for session in conversation["sessions"]:
        if not isinstance(session, dict) or not isinstance(session.get("turns"), list):
            kept.append(session)
            continue
        turns = []
        for turn in session["turns"]:
            if not isinstance(turn, dict):
                turns.append(turn)
                continue
            text = text_of(turn.get("text"), counts)
            if not text.strip():
                counts["empty_turns_skipped"] += 1
                skipped.add(str(turn.get("id")))
                continue
            turns.append({**turn, "text": text})
        if not turns:
            counts["empty_sessions_skipped"] += 1
            continue
        said = tuple((str(t.get("speaker")), str(t.get("text"))) for t in turns)
        if said in seen:
            counts["repeated_sessions_stored_once"] += 1
            same.update(zip((str(t.get("id")) for t in turns), seen[said], strict=True))
            continue
        seen[said] = [str(t.get("id")) for t in turns]
        sid = session.get("id")
        ids[str(sid)] += 1
        if ids[str(sid)] > 1 and isinstance(sid, str):
            counts["session_ids_made_unique"] += 1
            sid = f"{sid}#{ids[str(sid)]}"
        when = session.get("date")
        when = session_date(when, counts) if isinstance(when, str) else when
        kept.extend(_parts({**session, "id": sid, "date": when, "turns": turns}, counts))
    prepared = {**conversation, "sessions": kept}
    if "questions" in conversation:
        prepared["questions"] = _questions(conversation["questions"], same, skipped, counts)
    return prepared


def _parts(session: dict[str, Any], counts: Counter[str]) -> list[dict[str, Any]]:
    turns = session["turns"]
    if len(turns) <= MAX_SESSION_TURNS:
        return [session]
    counts["long_sessions_split"] += 1
    return [
        {**session, "id": f"{session['id']}#part{n + 1}" if n else session["id"],
         "turns": turns[at : at + MAX_SESSION_TURNS]}
        for n, at in enumerate(range(0, len(turns), MAX_SESSION_TURNS))
    ]  # fmt: skip


def _questions(
    questions: Any, same: dict[str, str], skipped: set[str], counts: Counter[str]
) -> Any:
    if not isinstance(questions, list):
        return questions
    out = []
    for question in questions:
        if not isinstance(question, dict):
            out.append(question)
            continue
        fixed = dict(question)
        for field in ("answers", "superseded"):
            named = question.get(field)
            if isinstance(named, list):
                mapped = [same.get(str(t), t) for t in named if str(t) not in skipped]
                fixed[field] = list(dict.fromkeys(mapped))
        if (
            isinstance(question.get("answers"), list)
            and question["answers"]
            and not fixed["answers"]
        ):
            counts["questions_without_evidence_dropped"] += 1
            continue
        out.append(fixed)
    return out
