"""The seed's end-to-end check, replayed on real parts: two turns of a LangGraph agent's
thread, the Prefect consolidation flow between them, and decay. Prints an OK/FAIL line per step.

Turn 2 shows the three memory tiers on the one PostgreSQL: the thread's earlier messages from
LangGraph's checkpointer (in-context), turn 1's facts ranked by relevance to the question
(semantic) and turn 1's summary with its date (episodic)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from rich.console import Console

from agent_memory.decay import today
from agent_memory.graph.state import MemoryState
from agent_memory.manager import MemoryManager
from agent_memory.models import Scope
from agent_memory.settings import Settings

TURN_1 = (
    "Hi! I'm a Python developer working on SAP integrations. I prefer async code "
    "and we use PostgreSQL for everything. My month-end close keeps timing out."
)
TURN_2 = "What language should I use for my next REST API?"


def _rule_agent(state: dict[str, Any]) -> dict[str, Any]:
    """A deterministic stand-in for an LLM agent: it answers from the facts it was given."""
    facts: list[str] = state.get("working_memory", {}).get("injected_facts", [])
    question = str(state["messages"][-1].content)
    if not facts:
        reply = "Nice to meet you! Tell me about your work and I will keep it in mind."
    elif "language" in question.lower():
        known = " ".join(facts)
        pick = "Python with FastAPI (async)" if "Python" in known else "the language you know best"
        reply = f"Given what I know ({'; '.join(facts[:3])}), I'd use {pick}."
    else:
        reply = "From earlier sessions I remember: " + "; ".join(facts[:3])
    return {"messages": [AIMessage(content=reply)]}


def _llm_agent(settings: Settings) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    from agent_memory.extraction.llm import LLMExtractor

    llm = LLMExtractor(settings.llm)

    async def agent(state: dict[str, Any]) -> dict[str, Any]:
        context = state.get("working_memory", {}).get("context", "")
        system = "You are a helpful assistant." + (f"\n\n{context}" if context else "")
        history = [{"role": "system", "content": system}] + [
            {"role": "user" if m.type == "human" else "assistant", "content": str(m.content)}
            for m in state["messages"]
        ]
        text, _ = await llm.complete(history)
        return {"messages": [AIMessage(content=text)]}

    return agent


def _turn(scope: Scope, text: str) -> MemoryState:
    return MemoryState(
        messages=[HumanMessage(text)],
        user_id=scope.user_id,
        agent_id=scope.agent_id,
        workflow_id=scope.workflow_id,
    )


@dataclass
class Demo:
    console: Console
    steps: int = 8
    failures: list[str] = field(default_factory=list)
    _n: int = 0

    def step(self, title: str, ok: bool, *details: str) -> bool:
        self._n += 1
        mark = "[green]✓ OK[/]" if ok else "[red]✗ FAIL[/]"
        self.console.print(f"[{self._n}/{self.steps}] {title:<44} {mark}", highlight=False)
        for line in details:
            self.console.print(f"      → {line}", highlight=False, soft_wrap=True)
        if not ok:
            self.failures.append(title)
        return ok


async def run(console: Console, settings: Settings) -> int:
    """Run the demo; returns the number of failed steps."""
    demo = Demo(console)
    console.print("[bold]=== agent-memory E2E demo ===[/]")
    started = time.perf_counter()
    # the demo shows every tier: the recent history is switched on
    memory = settings.memory.model_copy(update={"inject_history": 3})
    settings = settings.model_copy(update={"memory": memory})
    manager = await MemoryManager.create(settings=settings)
    where = "embedded PostgreSQL" if manager.database.embedded else manager.database.display
    demo.step("Starting MemoryManager...", True, f"database: {where}")
    stack = AsyncExitStack()
    try:
        agent: Any = _rule_agent if settings.llm.offline else _llm_agent(settings)
        graph = manager.graph(agent)
        saver = await stack.enter_async_context(manager.checkpointer())
        app = graph.compile(checkpointer=saver)
        demo.step(
            "Building mini LangGraph...",
            True,
            "inject_memory → agent → record_memory → END",
            "checkpointer: PostgresSaver in schema agent_memory_checkpoints, same database",
        )

        # a fresh workflow id per run keeps runs apart in a database that outlives the demo
        scope = Scope(
            user_id="demo-user",
            agent_id="demo-agent",
            workflow_id=f"demo-{int(time.time() * 1000)}",
        )
        await _two_turns(demo, manager, app, scope, offline=settings.llm.offline)
        await _decay(demo, manager, scope)
    finally:
        await stack.aclose()
        await manager.close()
    demo.step("Closing MemoryManager...", True, f"{time.perf_counter() - started:.1f} s in all")
    if demo.failures:
        console.print(f"[red]{len(demo.failures)} step(s) failed:[/] " + ", ".join(demo.failures))
    else:
        console.print("[green]All steps passed.[/]")
    return len(demo.failures)


async def _two_turns(
    demo: Demo, manager: MemoryManager, app: Any, scope: Scope, *, offline: bool
) -> None:
    """Turn 1, consolidation, turn 2 with every tier of memory, and whether its reply used
    what turn 1 said."""
    thread: RunnableConfig = {"configurable": {"thread_id": scope.workflow_id}}
    out1 = await app.ainvoke(_turn(scope, TURN_1), thread)
    injected1 = out1["working_memory"]["injected_facts"]
    demo.step(
        f'Turn 1: "{TURN_1[:32]}..."',
        not injected1 and bool(out1["messages"][-1].content),
        f"Injected facts: {len(injected1)} (first turn, empty)",
        f"AI: {out1['messages'][-1].content}",
    )

    summary = await manager.consolidate(scope)
    demo.step(
        "Consolidating episodes (Prefect flow)...",
        summary["completed"] == 1 and summary["facts_created"] > 0,
        f"Facts created: {summary['facts_created']} (extractor: {summary['extractor']})",
    )

    out2 = await app.ainvoke(_turn(scope, TURN_2), thread)
    injected2 = out2["working_memory"]["injected_facts"]
    history = out2["working_memory"]["history"]
    carried = len(out2["messages"]) - 2  # the thread's messages before this turn
    reply = str(out2["messages"][-1].content)
    demo.step(
        f'Turn 2: "{TURN_2[:32]}..."',
        bool(injected2) and bool(history) and carried == 2,
        f"In-context: {carried} earlier messages of the thread, from the checkpointer",
        f"Semantic: {len(injected2)} facts from turn 1, ranked by relevance to the question",
        *(f"  • {f}" for f in injected2),
        f"Episodic: {len(history)} earlier conversation(s)",
        *(f"  • {h['occurred_at'][:10]}: {h['summary']}" for h in history),
        f"AI: {reply}",
    )
    uses_memory = offline is False or any(
        word in reply for word in ("Python", "SAP", "async", "PostgreSQL")
    )
    demo.step(
        "Verifying memory injection...",
        bool(injected2) and uses_memory,
        "turn 2's reply draws on facts from turn 1",
    )


async def _decay(demo: Demo, manager: MemoryManager, scope: Scope) -> None:
    """Decay as of ten days later: each fact halves once per half-life of its kind."""
    known = await manager.facts(scope)
    before = [round(f.importance, 2) for f in known]
    later = today() + timedelta(days=10)
    report = await manager.decay(scope, as_of=later)
    after = [round(f.importance, 2) for f in await manager.facts(scope, on=later)]
    # (a year for who the user is)
    expected = [round(f.importance * 2 ** (-10 / (f.half_life or 1)), 2) for f in known]
    demo.step(
        "Testing decay (as of 10 days later)...",
        after == expected and bool(before),
        f"Before: {before}",
        f"After:  {after}",
        f"purged {report['purged']}, {report['expiring_within_7_days']} expiring within 7 days",
    )
