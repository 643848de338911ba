"""The loopback LLMs of the recall benchmark (benchmarks/recall.py): one that keeps every turn
as a fact (turns mode) and an oracle that knows the answers (facts mode, ``--extractor
oracle``). Each answers a consolidation prompt as ``tests.fake_llm`` replays it."""

from __future__ import annotations

import json
import re
from typing import Any

_LINE = re.compile(r"^(?:USER|ASSISTANT): (.+)$", re.M)
_KNOWN = re.compile(r"^\[(\d+)\] (.+) \((?:\w+), importance [0-9.]+\)$", re.M)
_EPISODE = re.compile(r"^------ Episode (\d+) ", re.M)


def every_turn(request: dict[str, Any]) -> Any:
    """The answer of a model that keeps every message of the prompt's episodes as a fact,
    naming the episode it comes from (the first that says it)."""
    from tests.fake_llm import Reply

    prompt = "\n".join(str(m.get("content", "")) for m in request.get("messages", []))
    first: dict[str, int] = {}
    for number, text in _episode_lines(prompt):
        first.setdefault(text, number)
    return Reply(
        json.dumps(
            [{"op": "add", "content": t, "importance": 0.5, "episode": n} for t, n in first.items()]
        )
    )


def _episode_lines(prompt: str) -> list[tuple[int, str]]:
    """(episode number, text) of each message of the prompt's episodes, in order."""
    marks = list(_EPISODE.finditer(prompt))
    lines: list[tuple[int, str]] = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(prompt)
        lines += [
            (int(mark[1]), t.strip())
            for t in _LINE.findall(prompt[mark.start() : end])
            if t.strip()
        ]
    return lines


def oracle(conversations: list[dict[str, Any]]) -> Any:
    """A loopback model that knows the answers: it adds each turn a question names as a fact
    (in the user's words) and, for a turn that changed an earlier answer, updates that fact
    (by its number when memory holds it, by ``replaces`` when this answer adds it). It
    measures what the pipeline does with a model's operations, not what a model finds."""
    from tests.fake_llm import Reply

    text = {t["id"]: t["text"] for c in conversations for s in c["sessions"] for t in s["turns"]}
    statements = {text[a] for c in conversations for q in c["questions"] for a in q["answers"]}
    statements |= {
        text[s] for c in conversations for q in c["questions"] for s in q.get("superseded", [])
    }
    replaced = {
        text[a]: text[s]
        for c in conversations
        for q in c["questions"]
        for a in q["answers"]
        for s in q.get("superseded", [])
    }

    def answer(request: dict[str, Any]) -> Any:
        prompt = "\n".join(str(m.get("content", "")) for m in request.get("messages", []))
        start = prompt.find("------ Episode")
        known = {m[2]: int(m[1]) for m in _KNOWN.finditer(prompt[:start])}
        ops: list[dict[str, Any]] = []
        added: set[str] = set()
        for number, said in _episode_lines(prompt):
            if said not in statements or said in added:
                continue
            op: dict[str, Any] = {"op": "add", "content": said, "importance": 0.7}
            old = replaced.get(said)
            if old in known:
                op = {**op, "op": "update", "id": known[old]}
            elif old in added:
                op = {**op, "op": "update", "replaces": old}
            ops.append({**op, "episode": number})
            added.add(said)
        return Reply(json.dumps(ops))

    return answer
