"""Memory policy: what inject returns and how, how facts fade."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from agent_memory.models import FactKind, Share
from agent_memory.settings._env import EnvSettings

# the longest half-life a fact may reach, however often it is said (days: a century)
MAX_HALF_LIFE = 36_500.0


class MemorySettings(EnvSettings):
    """How much to inject, how fast memories fade, and input limits."""

    model_config = SettingsConfigDict(env_prefix="AGENT_MEMORY_", env_file=".env", extra="ignore")

    inject_min_importance: float = Field(default=0.1, ge=0.0, le=1.0)
    inject_limit: int = Field(default=20, ge=1, le=1000)
    decay_factor: float = Field(
        default=0.95,
        gt=0.0,
        lt=1.0,
        description="daily factor of facts of kind general (no kind given): a half-life of "
        "ln 2 / -ln(factor) days, 13.5 at 0.95",
    )
    purge_threshold: float = Field(default=0.05, gt=0.0, lt=1.0)
    reinforce_boost: float = Field(
        default=0.05, ge=0.0, le=1.0, description="added to a fact's importance when said again"
    )
    # -- durability (docs: README "How memory fades") -------------------------------------------
    # half-lives in days by kind; a fact of importance 0.85 lasts about 4 half-lives before it
    # falls below the default purge threshold of 0.05
    half_life_identity: float = Field(
        default=365.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="who the user is: name, family, home, work, diet, health; true for years",
    )
    half_life_preference: float = Field(
        default=180.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="likes, dislikes, ways of working; change over seasons",
    )
    half_life_situation: float = Field(
        default=30.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="ongoing state: a project, a job search, training; true for weeks to months",
    )
    half_life_event: float = Field(
        default=14.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="something that happened; talked about for a few weeks",
    )
    half_life_plan: float = Field(
        default=7.0,
        gt=0.0,
        le=MAX_HALF_LIFE,
        description="an appointment or intention; moot once it is past",
    )
    mention_growth: float = Field(
        default=2.0,
        ge=1.0,
        le=10.0,
        description="a fact said again in another conversation has its half-life multiplied "
        "by this (the spacing effect); 1: no growth",
    )
    max_episode_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)

    # -- what inject returns (docs: README "How inject ranks") ---------------------------------
    inject_ranking: Literal["hybrid", "importance", "text", "vector"] = Field(
        default="hybrid",
        description="hybrid: relevance to the latest user message by full text and by meaning, "
        "fused by rank, with importance and recency as bounded priors; text or vector: one of "
        "the two alone; importance: the most important facts, whatever is asked",
    )
    inject_weight_text: float = Field(
        default=1.0, ge=0.0, le=100.0, description="weight of the full-text ranking in the fusion"
    )
    inject_weight_vector: float = Field(
        default=1.0, ge=0.0, le=100.0, description="weight of the ranking by meaning in the fusion"
    )
    inject_fusion: Literal["rrf", "relative"] = Field(
        default="relative",
        description="how the full-text and the meaning rankings are fused: relative, by "
        "score, each ranking's scores scaled to [0, 1] (full text: the share of the question's "
        "weight a fact holds); rrf, by rank (weight / (k + rank))",
    )
    inject_text_gate: bool = Field(
        default=True,
        description="scale the meaning ranking's weight by the share of the question's "
        "weight that its best full-text match does not hold: a question whose words a fact "
        "holds is answered by them, one that no fact's words match is left to meaning",
    )
    inject_vector_floor: bool = Field(
        default=True,
        description="count a fact's likeness to the question by meaning only above that of "
        "the last of the inject_candidates facts nearest to it (in a scope that has that many): "
        "the likeness a question has to every fact says nothing about any one",
    )
    inject_rrf_k: float = Field(
        default=60.0,
        gt=0.0,
        le=10_000.0,
        description="reciprocal rank fusion constant: a fact at rank r of a ranking adds "
        "weight / (k + r)",
    )
    inject_prior_weight: float = Field(
        default=0.1,
        ge=0.0,
        lt=1.0,
        description="how far importance and recency may re-order matches: a match's fused "
        "relevance is scaled by 1 - w + w * prior, so a prior only passes a match less than "
        "that far ahead",
    )
    inject_weight_importance: float = Field(
        default=1.0, ge=0.0, le=100.0, description="share of importance in the prior"
    )
    inject_weight_recency: float = Field(
        default=1.0, ge=0.0, le=100.0, description="share of recency in the prior"
    )
    inject_recency_half_life_days: float = Field(
        default=7.0, gt=0.0, le=36_500.0, description="days since last mention or use to halve"
    )
    # 25 against 50: recall@10 of the default inject within 0.006 on the built-in set and
    # LoCoMo (one lower, one higher), for an eighth less CPU an inject (docs/benchmarks.md)
    inject_candidates: int = Field(
        default=25,
        ge=1,
        le=100_000,
        description="facts taken from each ranking (full text, meaning, importance) into the "
        "fusion",
    )
    inject_snippets_tokens: int = Field(
        default=300,
        ge=0,
        le=100_000,
        description="tokens of past conversation messages relevant to the question to inject "
        "besides the facts (0: none); about four characters a token",
    )
    inject_snippet_replies: bool = Field(
        default=True,
        description="a past message that asks a question is injected with the reply after it "
        "(the next message, by another speaker), which says what the question only asks",
    )
    index_after_s: float = Field(
        default=1.0,
        ge=0.0,
        le=3600.0,
        description="a record's sentences are indexed for the conversation search this many "
        "seconds later, by the manager in the background (a burst of turns in one statement; "
        "until then a search reads them from their messages). 0: never by the manager, only by "
        "the consolidation flow and `agent-memory index`",
    )
    inject_reinforce: bool = Field(
        default=False,
        description="restart the decay clock of injected facts (at most once a day per fact)",
    )
    use_growth: float = Field(
        default=1.25,
        ge=1.0,
        le=10.0,
        description="with inject_reinforce, a fact's half-life is multiplied by this for each "
        "day it is injected (a mention's growth is stronger); 1: use only restarts the clock",
    )
    inject_dates: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="say since when each injected fact is true (its conversation's date): "
        "auto, when the question is about time or change (when, since, still, now, ...); "
        "always; never",
    )
    inject_history: int = Field(
        default=0, ge=0, le=100, description="recent episode summaries to inject (0: none)"
    )

    # -- levels of memory (docs: guide "Levels of memory") --------------------------------------
    share: Share = Field(
        default="user",
        description="what a scope reads besides its own facts (inject, search, the tools, "
        "MCP): exact, nothing; user, the person's facts (user_id alone) and, from a workflow, "
        "the person with that agent's; user,agent, also the agent's own knowledge (agent_id "
        "alone), shared by all its users. Never a sibling scope's or another user's",
    )

    store_namespace: tuple[str, ...] = Field(
        default=("memories", "{user_id}"),
        description="the LangGraph Store's memory namespaces: labels, with {user_id}, "
        "{agent_id} or {workflow_id} where the scope's parts are (JSON list in the environment)",
    )
    store_importance: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="importance of a memory put through the Store whose value gives none",
    )
    store_max_value_bytes: int = Field(
        default=256 * 1024,
        ge=1024,
        description="largest Store value accepted, in bytes of JSON",
    )

    def half_lives(self) -> dict[FactKind, float]:
        """Each fact kind's half-life in days, ``general`` from :attr:`decay_factor`."""
        return {
            "identity": self.half_life_identity,
            "preference": self.half_life_preference,
            "situation": self.half_life_situation,
            "event": self.half_life_event,
            "plan": self.half_life_plan,
            "general": math.log(2) / -math.log(self.decay_factor),
        }

    @field_validator("inject_ranking", mode="before")
    @classmethod
    def _old_ranking_name(cls, value: object) -> object:
        # "relevance" was the weighted mix this ranking replaced; it means the hybrid now
        return "hybrid" if value == "relevance" else value

    @field_validator("share", mode="before")
    @classmethod
    def _share_words(cls, value: object) -> object:
        # "agent, user" names the same levels as "user,agent"
        if isinstance(value, str) and "," in value:
            words = {w.strip().lower() for w in value.split(",")}
            return "user,agent" if words == {"user", "agent"} else value
        return value

    @model_validator(mode="after")
    def _some_weight(self) -> MemorySettings:
        if self.inject_ranking == "hybrid" and not (
            self.inject_weight_text or self.inject_weight_vector
        ):
            raise ValueError(
                "inject_ranking 'hybrid' needs inject_weight_text or inject_weight_vector above 0"
            )
        if self.inject_candidates < self.inject_limit:
            raise ValueError(
                f"inject_candidates ({self.inject_candidates}) is below inject_limit "
                f"({self.inject_limit}): relevance ranking would inject fewer facts"
            )
        return self
