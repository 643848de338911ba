"""The loopback LLMs of the recall benchmark (benchmarks/recall.py): one that keeps every turn
as a fact (turns mode) and an oracle that knows the answers (facts mode, ``--extractor
oracle``). Each answers a consolidation prompt as ``tests.fake_llm`` replays it.

Both know the dataset, and find each episode of a prompt again among its sessions by the
start of each of its messages, so a turn is always the whole turn of its own conversation: a
multi-line message is not cut to the prompt's first line, nor a long one to what the pipeline
kept of it, and a turn id (unique only within a conversation, as ``D1:3`` is in every LoCoMo
conversation) never names another conversation's turn.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

_KNOWN = re.compile(r"^\[(\d+)\] (.+) \((?:\w+), importance [0-9.]+\)$", re.M)
_EPISODE = re.compile(r"^------ Episode (\d+) \([^)]*\) ------$", re.M)
# a turn is found in a prompt by its first characters: the pipeline may cut a long message (a
# batch over its token budget keeps the start of each), never its start shorter than this
_FOUND_BY = 16
# a message of an episode in a prompt: "ROLE: text", up to the next message's line
_MESSAGE = re.compile(r"^\s*[A-Z_]+: (.*?)(?=\n[A-Z_]+: |\Z)", re.S)
_KEY = 8  # the characters of a session's first message it is looked up by


def _start(text: str) -> str:
    """What a session is looked up by: the start of its first message."""
    return text[:_KEY]


Session = tuple[str, dict[str, Any]]  # conversation id, session


class SessionIndex:
    """The dataset's sessions, found again from the episodes of a consolidation prompt: by the
    start of each of their turns, in order, so a turn cut by the pipeline is found by what it
    kept. Sessions the prompt cannot tell apart (the same turns, in two conversations) are all
    candidates; what the models make of them is the same text, which the scoring places in
    the conversation of the scope that stored it."""

    def __init__(self, conversations: list[dict[str, Any]]) -> None:
        self._by_start: dict[str, list[Session]] = defaultdict(list)
        for c in conversations:
            for s in c["sessions"]:
                self._by_start[_start(s["turns"][0]["text"])].append((c["id"], s))

    def episodes(self, prompt: str) -> list[tuple[int, list[Session]]]:
        """(episode number, the sessions it may be, the longest first) of each episode of
        ``prompt``; an episode that is no session of the dataset stops the run, naming it."""
        marks = list(_EPISODE.finditer(prompt))
        found = []
        for i, mark in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(prompt)
            block = prompt[mark.end() : end]
            message = _MESSAGE.match(block)
            first = _start(message[1] if message else block)
            matches = [
                (cid, s)
                for cid, s in self._by_start.get(first, [])
                if _in_order(block, [t["text"][:_FOUND_BY] for t in s["turns"]])
            ]
            if not matches:
                raise ValueError(
                    f"episode {mark[1]} of a prompt is no session of the dataset"
                    f" (it starts {first!r})"
                )
            # a session whose turns begin another's (a later export of the same talk) is found
            # in the longer one's episode too: the longer is the episode
            matches.sort(key=lambda m: -len(m[1]["turns"]))
            found.append((int(mark[1]), matches))
        return found


def _in_order(block: str, texts: list[str]) -> bool:
    at = 0
    for text in texts:
        at = block.find(text, at)
        if at < 0:
            return False
        at += len(text)
    return True


def _prompt(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in request.get("messages", []))


def attributed(turn: dict[str, Any]) -> str:
    """A turn as a fact that stands on its own: who said it, then what they said."""
    return f"{turn['speaker']}: {turn['text']}"


def every_turn(conversations: list[dict[str, Any]]) -> Callable[[dict[str, Any]], Any]:
    """A model that keeps every turn of the prompt's episodes as a fact, whole and attributed
    ("Caroline: I went to a support group."), naming the episode it comes from (the first
    that says it)."""
    from tests.fake_llm import Reply

    index = SessionIndex(conversations)

    def answer(request: dict[str, Any]) -> Any:
        first: dict[str, int] = {}
        for number, sessions in index.episodes(_prompt(request)):
            for turn in sessions[0][1]["turns"]:
                first.setdefault(attributed(turn), number)
        return Reply(
            json.dumps(
                [
                    {"op": "add", "content": t, "importance": 0.5, "episode": n}
                    for t, n in first.items()
                ]
            )
        )

    return answer


def oracle(conversations: list[dict[str, Any]]) -> Callable[[dict[str, Any]], Any]:
    """A loopback model that knows the answers: it adds each turn a question names as a fact
    (in the user's words) and, for a turn that changed an earlier answer, updates that fact
    (by its number when memory holds it, by ``replaces`` when this answer adds it). It
    measures what the pipeline does with a model's operations, not what a model finds."""
    from tests.fake_llm import Reply

    index = SessionIndex(conversations)
    text = {(c["id"], t["id"]): t["text"] for c in conversations for s in c["sessions"]
            for t in s["turns"]}  # fmt: skip
    # what each conversation's questions name, and what a changed answer replaces
    statements: dict[str, set[str]] = defaultdict(set)
    replaced: dict[tuple[str, str], str] = {}
    for c in conversations:
        for q in c["questions"]:
            stale = q.get("superseded", [])
            statements[c["id"]] |= {text[c["id"], t] for t in [*q["answers"], *stale]}
            for a in q["answers"]:
                for s in stale:
                    replaced[c["id"], text[c["id"], a]] = text[c["id"], s]

    def answer(request: dict[str, Any]) -> Any:
        prompt = _prompt(request)
        start = prompt.find("------ Episode")
        known = {m[2]: int(m[1]) for m in _KNOWN.finditer(prompt[:start])}
        ops: list[dict[str, Any]] = []
        added: set[str] = set()
        for number, sessions in index.episodes(prompt):
            # the same turns in several conversations: what any of them names is added (the
            # scoring credits a fact only in the conversation whose scope stored it)
            cids = [cid for cid, _ in sessions]
            for turn in sessions[0][1]["turns"]:
                said = turn["text"]
                if said in added or not any(said in statements[cid] for cid in cids):
                    continue
                cid = next(cid for cid in cids if said in statements[cid])
                op: dict[str, Any] = {"op": "add", "content": said, "importance": 0.7}
                old = replaced.get((cid, said))
                if old in known:
                    op = {**op, "op": "update", "id": known[old]}
                elif old in added:
                    op = {**op, "op": "update", "replaces": old}
                ops.append({**op, "episode": number})
                added.add(said)
        return Reply(json.dumps(ops))

    return answer
