"""Which past messages an inject shows beside its facts, within its token budget."""

from __future__ import annotations

import functools
import re
from typing import Any

from agent_memory import token_estimate
from agent_memory.db.recall import Ranked
from agent_memory.models import Snippet

# snippets: the longest text one may inject (a pasted document is not a memory), and the
# tokens of a typical dated line (a sentence of 120 characters), which sizes the search
_SNIPPET_MAX_CHARS = 400
_SNIPPET_LINE_TOKENS = 30


def snippet_rows(tokens: int) -> int:
    """How many snippets the search returns for a budget of ``tokens`` to choose from: twice
    as many as the budget holds at typical lines, the rest standing in for those a fact or a
    better snippet already says. Every row costs the hot path CPU (read, built, weighed against
    the facts), and rows far down the list seldom make it in (docs/benchmarks.md)."""
    return max(10, min(500, 2 * tokens // _SNIPPET_LINE_TOKENS))


_LONG_WORD = re.compile(r"\w{4,}")


@functools.lru_cache(maxsize=4096)
def _words(text: str) -> frozenset[str]:
    """The words that say what a text is about, roughly: those of four letters or more.
    Remembered: a scope's facts and messages come back inject after inject."""
    return frozenset(_LONG_WORD.findall(text.lower()))


def _cut(snippet: Snippet) -> Snippet:
    """The snippet with its text and its reply's cut to what one may inject."""
    update: dict[str, Any] = {}
    if len(snippet.content) > _SNIPPET_MAX_CHARS:
        update["content"] = snippet.content[: _SNIPPET_MAX_CHARS - 1] + "\u2026"
    if snippet.reply is not None and len(snippet.reply.content) > _SNIPPET_MAX_CHARS:
        text = snippet.reply.content[: _SNIPPET_MAX_CHARS - 1] + "\u2026"
        update["reply"] = snippet.reply.model_copy(update={"content": text})
    return snippet.model_copy(update=update) if update else snippet


def _covers(fact: frozenset[str], snippet: frozenset[str]) -> bool:
    """True when a fact says what a snippet says (most of the shorter one's words)."""
    if not fact or not snippet:
        return False
    return len(fact & snippet) >= 0.8 * min(len(fact), len(snippet))


class _FactWords:
    """The injected facts' words, indexed by word: whether a fact says what a snippet says
    (:func:`_covers`) is asked of the facts that share a word with it, not of every fact (an
    inject weighs about twenty snippets against twenty facts, on the agent's path)."""

    def __init__(self, facts: Ranked) -> None:
        self.sizes: list[int] = []
        self.holding: dict[str, list[int]] = {}
        holding = self.holding
        for at, (_, content, _, _) in enumerate(facts):
            words = _words(content)
            for word in words:
                if word in holding:
                    holding[word].append(at)
                else:
                    holding[word] = [at]
            self.sizes.append(len(words))

    def cover(self, says: frozenset[str]) -> bool:
        """True when a fact says what ``says`` says (as :func:`_covers` has it)."""
        shared: dict[int, int] = {}
        holding = self.holding
        for word in says:
            if word in holding:
                for fact in holding[word]:
                    shared[fact] = shared.get(fact, 0) + 1
        n, sizes = len(says), self.sizes
        return any(k >= 0.8 * min(sizes[fact], n) for fact, k in shared.items())


def _first_covering(
    chosen: list[tuple[Snippet, frozenset[str]]], says: frozenset[str]
) -> int | None:
    """The first chosen snippet that says what ``says`` says (as :func:`_covers` has it)."""
    n = len(says)
    if not n:
        return None
    for at, (_, said) in enumerate(chosen):  # _covers, inlined: it is asked most
        if said and len(said & says) >= 0.8 * min(len(said), n):
            return at
    return None


def chosen_snippets(found: list[Snippet], facts: Ranked, tokens: int) -> list[Snippet]:
    """The best snippets within the token budget (each line's tokens estimated by its script,
    `agent_memory.token_estimate`), skipping what an injected fact or a better snippet already
    says. A question's reply counts as what the snippet says: the question alone is context
    for it."""
    if not found:
        return []
    budget = float(tokens)
    facts_say = _FactWords(facts)
    chosen: list[tuple[Snippet, frozenset[str]]] = []
    shown: set[tuple[int, int]] = set()  # (episode, position) of each message shown whole
    for snippet in found:
        snippet = _cut(snippet)
        if snippet.reply is not None and (snippet.episode_id, snippet.reply.position) in shown:
            snippet = snippet.model_copy(update={"reply": None})  # said already
        if snippet.reply is None and (snippet.episode_id, snippet.position) in shown:
            continue
        says = _words(snippet.reply.content if snippet.reply else snippet.content)
        # what a fact or a better snippet already says is not worth its tokens again
        if facts_say.cover(says):
            continue
        cost = token_estimate.tokens(snippet.line())
        same = _first_covering(chosen, says)
        if same is not None:
            # the user's own words stand in for another's restatement of them, at its rank
            other = chosen[same][0]
            freed = token_estimate.tokens(other.line())
            if snippet.role == "user" != other.role and cost <= budget + freed:
                budget += freed - cost
                chosen[same] = (snippet.model_copy(update={"score": other.score}), says)
            continue
        if cost > budget:
            break
        budget -= cost
        chosen.append((snippet, says))
        if snippet.reply is not None:
            shown.add((snippet.episode_id, snippet.reply.position))
    return [snippet for snippet, _ in chosen]
