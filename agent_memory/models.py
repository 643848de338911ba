"""Typed records: scopes, episodes, facts, jobs and the working-memory frame."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field

from agent_memory.errors import InvalidScopeError

SCOPE_FIELDS = ("user_id", "agent_id", "workflow_id")
MAX_SCOPE_PART_CHARS = 256


def _check_part(name: str, value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidScopeError(
            f"{name} must be a string or None, got {type(value).__name__}: {value!r:.80}"
        )
    text = str(value)
    if text == "":
        raise InvalidScopeError(f"{name} is an empty string; use None for 'no {name}'")
    if len(text) > MAX_SCOPE_PART_CHARS:
        raise InvalidScopeError(
            f"{name} is {len(text)} characters long, over the limit of {MAX_SCOPE_PART_CHARS}: "
            f"{text[:40]!r}..."
        )
    if "\x00" in text:
        raise InvalidScopeError(f"{name} contains a NUL character: {text!r:.80}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidScopeError(
            f"{name} is not valid Unicode text ({exc.reason}): {text!r:.80}"
        ) from None
    return text


def scope_label(user_id: str | None, agent_id: str | None, workflow_id: str | None) -> str:
    """``user=alice agent=support`` (``global`` when all parts are None); validates nothing."""
    values = (user_id, agent_id, workflow_id)
    parts = [f"{n.removesuffix('_id')}={v}" for n, v in zip(SCOPE_FIELDS, values, strict=True) if v]
    return " ".join(parts) if parts else "global"


# What a scope reads besides itself (AGENT_MEMORY_SHARE, see Scope.levels): nothing; the
# person's levels; those and the agent's own knowledge.
Share = Literal["exact", "user", "user,agent"]
SHARES: tuple[Share, ...] = get_args(Share)

# The level a fact is filed at, by the parts of its scope: the person (user only), the person
# with one agent, the person in one workflow (with an agent or not), an agent's own knowledge
# (agent only); "scope" for any other shape (no user, and a workflow or nothing at all).
Level = Literal["user", "user_agent", "workflow", "agent", "scope"]
LEVELS: tuple[Level, ...] = get_args(Level)


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory: (user_id, agent_id, workflow_id), each optional and matched exactly.

    ``Scope(user_id="alice")`` and ``Scope(user_id="alice", agent_id="support")`` are different
    scopes; a part left as ``None`` matches only ``None``.
    """

    user_id: str | None = None
    agent_id: str | None = None
    workflow_id: str | None = None

    def __post_init__(self) -> None:
        for name in SCOPE_FIELDS:
            object.__setattr__(self, name, _check_part(name, getattr(self, name)))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Scope:
        return cls(**{name: data.get(name) for name in SCOPE_FIELDS})

    @property
    def params(self) -> tuple[str | None, str | None, str | None]:
        return (self.user_id, self.agent_id, self.workflow_id)

    @property
    def label(self) -> str:
        """A short human label for run names and tables: ``user=alice agent=support``."""
        return scope_label(*self.params)

    def as_dict(self) -> dict[str, str | None]:
        return dict(zip(SCOPE_FIELDS, self.params, strict=True))

    @property
    def level(self) -> Level:
        """Which level of memory a fact filed under this scope belongs to (see `Level`)."""
        user, agent, workflow = self.params
        if user is None:
            return "agent" if agent is not None and workflow is None else "scope"
        if workflow is not None:
            return "workflow"
        return "user_agent" if agent is not None else "user"

    def levels(self, share: Share = "user") -> tuple[Scope, ...]:
        """The scopes whose facts this scope reads under ``share`` (AGENT_MEMORY_SHARE), itself
        first. The one rule of what crosses (docs/guide.md, "Levels of memory"):

        * ``exact``: this scope alone (the behaviour before levels);
        * ``user``: also the person's level ``(user_id, None, None)`` and, from a workflow of an
          agent, the person with that agent ``(user_id, agent_id, None)``; a scope with no
          ``user_id`` reads itself alone;
        * ``user,agent``: also the agent's own knowledge ``(None, agent_id, None)``, shared by
          all its users.

        A scope only ever reads scopes made by leaving its own parts out, never one with a part
        it does not have: ``(alice, billing)`` never reads ``(alice, support)`` nor
        ``(alice, support, w1)``, and nothing of another user. ``Scope("alice", "support",
        "w1").levels("user")``: itself, ``(alice, support)``, ``(alice)``.
        """
        user, agent, workflow = self.params
        found = [self]
        if share != "exact" and user is not None:
            if agent is not None and workflow is not None:
                found.append(Scope(user, agent))
            found.append(Scope(user))
        if share == "user,agent" and agent is not None:
            found.append(Scope(agent_id=agent))
        return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class Window:
    """Which pending episodes a run takes: those that happened in [since, until) (None: no
    bound), of these user ids (None: any), in scopes of this shard."""

    since: datetime | None = None
    until: datetime | None = None
    users: list[str] | None = None
    shard: int = 0  # this run's share of the scopes: those whose key hashes to shard ...
    shards: int = 1  # ... modulo shards (disjoint runs, e.g. one per worker)

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= 1024 or not 0 <= self.shard < self.shards:
            raise InvalidScopeError(
                f"shard {self.shard} of {self.shards}: need 1 <= shards <= 1024 and "
                "0 <= shard < shards"
            )
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise InvalidScopeError(f"{name} {value.isoformat()} has no time zone")
        if self.since and self.until and self.since >= self.until:
            raise InvalidScopeError(
                f"since {self.since.isoformat()} is not before until {self.until.isoformat()}"
            )
        if self.users is not None and (not self.users or not all(self.users)):
            raise InvalidScopeError(f"users {self.users!r}: give non-empty user ids, or None")


# How long a fact stays true, which sets how fast it fades (a half-life per kind, settings
# AGENT_MEMORY_HALF_LIFE_*): identity (who the user is: name, family, home, work, diet,
# health), preference (likes, dislikes, ways of working), situation (an ongoing state: a
# project, a job search, training), event (something that happened), plan (an appointment or an
# intention), general (none of these, or not said: the daily AGENT_MEMORY_DECAY_FACTOR).
FactKind = Literal["identity", "preference", "situation", "event", "plan", "general"]
FACT_KINDS: tuple[FactKind, ...] = get_args(FactKind)


class Fact(BaseModel):
    """A fact as an extractor returns it, before it is stored."""

    content: str = Field(min_length=1, max_length=4000)
    importance: float = Field(ge=0.0, le=1.0)
    kind: FactKind = "general"


class Operation(BaseModel):
    """One change to a scope's memory, as an extractor decides it.

    ``add`` a new fact (a known one, reworded or not, is reinforced instead of copied);
    ``update`` fact ``target`` to ``content`` (the old one is kept as superseded); ``delete``
    (invalidate) fact ``target``, which the conversation contradicts. ``target`` is a stored
    fact id: extractors see short numbers, and map them back, so a model cannot invent ids.
    ``summary``: ``content`` is a one-sentence summary of conversation ``episode`` (1-based,
    in the order the batch gave them) for the episodic tier; it changes no fact.
    ``sources``: the conversations (1-based numbers, as for ``episode``) an added or updated
    fact comes from; empty when the extractor did not say, and then it is all of the batch's.
    """

    op: Literal["add", "update", "delete", "summary"] = "add"
    content: str | None = Field(default=None, min_length=1, max_length=4000)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    target: int | None = None
    episode: int | None = Field(default=None, ge=1)
    sources: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)
    kind: FactKind = "general"
    # an update or delete of a fact that an earlier episode of the same batch said (no id yet):
    # that fact's content, as this answer adds it
    replaces: str | None = None
    # the level of memory an added or updated fact belongs to, as the extractor says it (None:
    # by its kind, or the updated fact's own; see agent_memory.levels)
    level: Level | None = None

    @property
    def fact(self) -> Fact:
        assert self.content is not None
        return Fact(content=self.content, importance=self.importance, kind=self.kind)


@dataclass(frozen=True)
class KnownFact:
    """A current fact shown to the extractor: its short number in the prompt and its id; and
    the scope it is filed under (a level the consolidated scope reads; None: that scope)."""

    number: int
    fact_id: int
    content: str
    importance: float
    kind: FactKind = "general"
    scope: Scope | None = None


class MemoryItem(BaseModel):
    """A stored fact with its importance as of the day it was read."""

    id: int
    user_id: str | None
    agent_id: str | None
    workflow_id: str | None
    content: str
    importance: float
    base_importance: float
    importance_at: datetime
    created_at: datetime
    updated_at: datetime
    superseded_at: datetime | None = None
    superseded_by: int | None = None
    kind: FactKind = "general"
    half_life: float | None = None  # days, grown by mentions
    mentions: int = 1  # independent conversations that said it
    # when it became true as far as memory knows (its earliest conversation), and when a later
    # conversation superseded it (None: still true)
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class ScoredFact(MemoryItem):
    """A fact a search found, with how well it matched (higher is better; the scale is the
    ranking's, see `agent_memory.db.recall`)."""

    score: float


class Episode(BaseModel):
    """One recorded conversation."""

    id: int
    user_id: str | None
    agent_id: str | None
    workflow_id: str | None
    messages: list[dict[str, Any]]
    occurred_at: datetime
    created_at: datetime
    consolidated: bool
    summary: str | None = None  # one sentence, written when it is consolidated

    @property
    def scope(self) -> Scope:
        return Scope(self.user_id, self.agent_id, self.workflow_id)


JobStatus = Literal["running", "completed", "skipped", "failed", "dead"]
InjectRanking = Literal["importance", "priors", "text", "vector", "hybrid"]  # an inject's

# Where a fact's decay clock starts: when memory learned it ("import": the later of the
# conversation's time and when its episode was stored, so history imported today starts fresh)
# or when the conversation happened ("conversation": old history is as faded as it is old).
DecayFrom = Literal["import", "conversation"]


class ConsolidationJob(BaseModel):
    """One consolidation attempt of one scope."""

    id: int
    user_id: str | None
    agent_id: str | None
    workflow_id: str | None
    status: JobStatus
    episodes_processed: int
    facts_created: int
    content_checksum: str | None
    extractor: str | None
    flow_run_id: str | None
    started_at: datetime
    finished_at: datetime | None
    error: str | None
    model: str | None = None
    facts_updated: int = 0
    facts_invalidated: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    latency_ms: int = 0
    cost_usd: float | None = None


class HistoryEntry(BaseModel):
    """One past session in the episodic tier: when it happened and what it was about."""

    occurred_at: datetime
    summary: str


class Reply(BaseModel):
    """The message that answered a question of a past conversation."""

    position: int  # its index in the episode
    speaker: str
    content: str


class Snippet(BaseModel):
    """A sentence of a message of a past conversation, found by relevance to a question; a
    question comes with the reply that followed it."""

    id: int | None  # None: its conversation waits to be indexed (read from its messages)
    episode_id: int
    position: int  # the message's index in its episode
    speaker: str  # its author's name, else its role
    occurred_at: datetime
    content: str
    score: float = 0.0
    role: str | None = None  # user, assistant, ...
    reply: Reply | None = None

    def line(self) -> str:
        """The snippet as a dated, attributed line for a prompt (with the reply, if any)."""
        said = f"{self.occurred_at.date().isoformat()}, {self.speaker}: {self.content}"
        return f"{said} \u2014 {self.reply.speaker}: {self.reply.content}" if self.reply else said


# How the frame marks a fact of a level where it helps the agent: an agent's own knowledge is
# how a task is done, not something about the user. Facts of the person's levels are about
# the user, as the frame's heading says, and carry no mark.
_TAGS: dict[str, str] = {"agent": " [agent knowledge, not about this user]"}


class WorkingMemoryFrame(BaseModel):
    """What ``inject_memory`` puts in ``state["working_memory"]``.

    ``context`` is the whole frame as text for a system prompt: the facts, then the recent
    conversation history (when ``AGENT_MEMORY_INJECT_HISTORY`` asks for it).
    """

    user_id: str | None = None
    agent_id: str | None = None
    workflow_id: str | None = None
    injected_facts: list[str] = Field(default_factory=list)
    fact_ids: list[int] = Field(default_factory=list)
    importances: list[float] = Field(default_factory=list)
    # what ranked these facts: importance alone; the priors alone (no question); relevance to
    # the question by full text, by meaning, or both fused ("hybrid")
    ranking: InjectRanking = "importance"
    scores: list[float] = Field(default_factory=list)  # the ranking's score (not importance)
    # when each fact became true, as said in the prompt ("since 2026-05-20"; events "on ...");
    # empty when dates are not given (AGENT_MEMORY_INJECT_DATES)
    fact_dates: list[str] = Field(default_factory=list)
    # the level of memory each fact is filed at (Scope.level), when inject read more than one
    # (AGENT_MEMORY_SHARE); empty when it read its own scope alone
    fact_levels: list[Level] = Field(default_factory=list)
    history: list[HistoryEntry] = Field(default_factory=list)  # newest first
    # messages of past conversations relevant to the question (AGENT_MEMORY_INJECT_SNIPPETS_TOKENS)
    snippets: list[Snippet] = Field(default_factory=list)
    context: str = ""

    def render(self) -> str:
        """The frame as text for a system prompt (empty when there is nothing to say)."""
        parts: list[str] = []
        if self.injected_facts:
            dates = self.fact_dates or [""] * len(self.injected_facts)
            levels = self.fact_levels or ["scope"] * len(self.injected_facts)
            parts.append(
                "What you know about the user:\n"
                + "\n".join(
                    f"- {f}{_TAGS.get(level, '')} ({d})" if d else f"- {f}{_TAGS.get(level, '')}"
                    for f, d, level in zip(self.injected_facts, dates, levels, strict=True)
                )
            )
        if self.snippets:
            parts.append(
                "From past conversations:\n" + "\n".join(f"- {s.line()}" for s in self.snippets)
            )
        if self.history:
            parts.append(
                "Recent conversation history:\n"
                + "\n".join(f"\u2022 {h.occurred_at:%Y-%m-%d}: {h.summary}" for h in self.history)
            )
        return "\n\n".join(parts)
