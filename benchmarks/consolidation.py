"""python -m benchmarks.consolidation [--quick]

Consolidation through the real Prefect flow, with litellm talking over HTTP to a loopback
OpenAI-compatible server (in a process of its own, as a provider is) that answers after a
fixed delay, reporting to a `prefect server start` of its own (Prefect's default, SQLite).
Prints JSON:

* llm_200ms  - N scopes x 5 episodes, 200 ms per LLM call, concurrency 16: wall time against
               the ideal N * 0.2 s / 16 (bound: <= 1.3 x ideal at 1,000 scopes)
* llm_200ms_two_shards - the same scopes as two workers run them: a shard each
               (shard/shard_count), in processes of their own, concurrency 8 each (16 in all,
               the same ideal); the bound is met by either this or llm_200ms
* llm_0ms    - the same with an instant LLM: scopes per second through the flow
* rerun      - consolidating the same content again: LLM calls (bound: 0)
* backlog    - one scope with 2,000 episodes: prompt tokens sent / conversation tokens
               (bound: <= 1.3), both counted with litellm's token counter
* machine_cpu_busy - the share of all the machine's cores busy during a 200 ms run (the flow,
               PostgreSQL, Prefect's server, the loopback LLM): near 1, more processes cannot
               help
* cpu_floor  - the references for the first two: CPU one bare litellm call costs this
               process, against the CPU budget per scope the ideal leaves (0.2 s / 16 =
               12.5 ms); the same calls by bare litellm, and by plain HTTP (the loopback
               server's own distance from the ideal), against the ideal
* scale      - 10,000 scopes x 5 episodes in one run, instant LLM (the most events a second):
               the server's log must show no dropped event ("Subscription queue is full") and
               no 503, and every task run must be recorded in a final state (bound: 0, 0, 0)

Each flow's CPU per scope is reported too: when it exceeds the budget the run is CPU-bound and
the LLM's delay no longer matters (compare llm_200ms with llm_0ms).
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from benchmarks._common import prefect_defaults

os.environ.update(prefect_defaults())

import psycopg

from benchmarks._common import (
    admin_database,
    emit,
    fresh_database,
    machine_busy,
    machine_cpu,
    parser,
    prefect_server,
)
from benchmarks._consolidation_runs import (
    ANSWER,
    bare_http,
    bare_litellm,
    load_scopes,
    run_flow,
    settings_for,
    shard_workers,
    timed_flow,
)
from benchmarks._prefect_api import (
    FINAL,
    api,
    section,
    server_trouble,
    task_runs_of,
    wait_until_quiet,
)
from tests.fake_llm import FakeLLMProcess

if TYPE_CHECKING:
    from agent_memory_flows.prefect_server import PrefectServer

__all__ = ["main"]


@dataclass(frozen=True)
class _Bench:
    """What every measurement runs against, and the sizes it runs at."""

    admin: str
    prefect: PrefectServer
    llm: FakeLLMProcess
    scopes: int
    backlog_size: int
    scale_scopes: int
    concurrency: int
    delay: float


def measure(
    result: dict[str, Any],
    admin: str,
    prefect: PrefectServer,
    llm: FakeLLMProcess,
    *,
    scopes: int,
    backlog_size: int,
    scale_scopes: int,
    concurrency: int,
    delay: float,
) -> None:
    """Every measurement into ``result`` under its name, each on databases of its own."""
    # imported by the benchmark before any flow runs, as it always was: the library's first
    # use then finds it imported (agent_memory.extraction.llm._litellm)
    import litellm  # noqa: F401

    b = _Bench(admin, prefect, llm, scopes, backlog_size, scale_scopes, concurrency, delay)
    # warm up: imports and first connections, outside the measurements
    section({}, "warm_up", partial(_warm_up, b), prefect.api_url)
    for name, step in (
        ("llm_200ms", _slow_llm),
        ("llm_200ms_two_shards", _slow_llm_shards),
        ("llm_0ms", _instant_llm),
        ("rerun_unchanged", _rerun),
        ("backlog", _backlog),
        ("cpu_floor", _floor),
        ("scale", _scale),
    ):
        section(result, name, partial(step, b), prefect.api_url)


def _warm_up(b: _Bench) -> dict[str, Any]:
    dsn = fresh_database(b.admin, "bench_warmup")
    load_scopes(dsn, 2, 1)
    b.llm.reset(ANSWER)
    asyncio.run(run_flow(settings_for(dsn, b.llm.api_base, b.concurrency)))
    return {}


def _slow_llm(b: _Bench) -> dict[str, Any]:
    """1. A 200 ms LLM: wall time against the ideal, and CPU per scope."""
    dsn = fresh_database(b.admin, "bench_200ms")
    load_scopes(dsn, b.scopes, 5)
    b.llm.reset(ANSWER, delay_s=b.delay)
    machine = machine_cpu()
    wall, cpu, summary = timed_flow(settings_for(dsn, b.llm.api_base, b.concurrency))
    ideal = b.scopes * b.delay / b.concurrency
    return {
        "wall_s": round(wall, 2),
        "ideal_s": round(ideal, 2),
        "wall_over_ideal": round(wall / ideal, 3),
        "bound": "<= 1.3",
        "flow_cpu_ms_per_scope": round(cpu / b.scopes * 1000, 1),
        "cpu_busy": round(cpu / wall, 2),
        "machine_cpu_busy": machine_busy(machine),
        "completed": summary["completed"],
        "llm_calls": b.llm.calls,
    }


def _slow_llm_shards(b: _Bench) -> dict[str, Any]:
    """1b. The same, as two workers would run it: a shard each, in processes of their own,
    half the concurrency each (16 calls in flight in all: the same ideal)."""
    dsn = fresh_database(b.admin, "bench_200ms_shards")
    warm = fresh_database(b.admin, "bench_200ms_shards_warm")
    load_scopes(dsn, b.scopes, 5)
    load_scopes(warm, 2, 1)
    b.llm.reset(ANSWER, delay_s=b.delay)
    count = 2
    runs, busy = shard_workers(dsn, warm, b.llm, count, b.concurrency, b.delay)
    wall = max(r["ended"] for r in runs) - min(r["started"] for r in runs)
    ideal = b.scopes * b.delay / b.concurrency
    return {
        "workers": count,
        "concurrency_each": b.concurrency // count,
        "wall_s": round(wall, 2),
        "ideal_s": round(ideal, 2),
        "wall_over_ideal": round(wall / ideal, 3),
        "bound": "<= 1.3",
        "scopes_each": [r["scopes"] for r in runs],
        "flow_cpu_ms_per_scope": round(sum(r["cpu_s"] for r in runs) / b.scopes * 1000, 1),
        "machine_cpu_busy": busy,
        "completed": sum(r["completed"] for r in runs),
        "llm_calls": b.llm.calls,
    }


def _instant_llm(b: _Bench) -> dict[str, Any]:
    """2. An instant LLM: scopes per second through the flow."""
    dsn = fresh_database(b.admin, "bench_0ms")
    load_scopes(dsn, b.scopes, 5)
    b.llm.reset(ANSWER)
    wall, cpu, summary = timed_flow(settings_for(dsn, b.llm.api_base, b.concurrency))
    return {
        "wall_s": round(wall, 2),
        "scopes_per_s": round(summary["completed"] / wall, 1),
        "flow_cpu_ms_per_scope": round(cpu / b.scopes * 1000, 1),
        "completed": summary["completed"],
    }


def _rerun(b: _Bench) -> dict[str, Any]:
    """3. The same content again: every answer comes from the cache."""
    dsn = fresh_database(b.admin, "bench_rerun")
    load_scopes(dsn, b.scopes, 5)
    b.llm.reset(ANSWER)
    timed_flow(settings_for(dsn, b.llm.api_base, b.concurrency))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE agent_memory.episodes SET consolidated = false")
    b.llm.reset(ANSWER)
    wall, _cpu, summary = timed_flow(settings_for(dsn, b.llm.api_base, b.concurrency))
    return {
        "llm_calls": b.llm.calls,
        "bound": "== 0",
        "completed": summary["completed"],
        "wall_s": round(wall, 2),
    }


def _backlog(b: _Bench) -> dict[str, Any]:
    """4. A long backlog in one scope: the prompt tokens sent against the conversation's."""
    import litellm

    from agent_memory.extraction.prompt import format_episodes
    from agent_memory.models import Episode

    dsn = fresh_database(b.admin, "bench_backlog")
    load_scopes(dsn, 1, b.backlog_size)
    b.llm.reset(ANSWER)
    _wall, _cpu, summary = timed_flow(settings_for(dsn, b.llm.api_base, b.concurrency))
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, user_id, agent_id, workflow_id, messages, occurred_at,"
            " created_at, consolidated FROM agent_memory.episodes"
        ).fetchall()
    cols = [
        "id",
        "user_id",
        "agent_id",
        "workflow_id",
        "messages",
        "occurred_at",
        "created_at",
        "consolidated",
    ]
    episodes = [Episode.model_validate(dict(zip(cols, r, strict=True))) for r in rows]
    conversation = sum(
        litellm.token_counter(model="gpt-4o", text=format_episodes([e])) for e in episodes
    )
    sent = sum(
        litellm.token_counter(model="gpt-4o", messages=r["messages"]) for r in b.llm.requests
    )
    return {
        "episodes": b.backlog_size,
        "batches": summary["results"][0]["batches"],
        "llm_calls": b.llm.calls,
        "conversation_tokens": conversation,
        "prompt_tokens_sent": sent,
        "sent_over_conversation": round(sent / conversation, 3),
        "bound": "<= 1.3",
    }


def _floor(b: _Bench) -> dict[str, Any]:
    """The reference: what a bare litellm call costs this process, in the same run."""
    llm, concurrency, delay = b.llm, b.concurrency, b.delay
    llm.reset(ANSWER)
    per_call, _wall = bare_litellm(llm, 200, concurrency)
    # the same calls as llm_200ms would make, a fifth of them: bare litellm's own
    # distance from the ideal, which no flow around it can beat
    calls = max(b.scopes // 5, 4 * concurrency)
    llm.reset(ANSWER, delay_s=delay)
    _cpu, wall = bare_litellm(llm, calls, concurrency)
    ideal = calls * delay / concurrency
    http = bare_http(llm, calls, concurrency)
    return {
        "litellm_cpu_ms_per_call": round(per_call, 2),
        "cpu_budget_ms_per_scope": round(delay / concurrency * 1000, 2),
        "bare_200ms_calls": calls,
        "bare_200ms_wall_over_ideal": round(wall / ideal, 3),
        "server_200ms_wall_over_ideal": round(http / ideal, 3),
        "note": "one event loop must spend under the budget per scope to keep "
        "16 calls of 200 ms in flight; bare_200ms_wall_over_ideal is litellm alone, "
        "server_200ms_wall_over_ideal plain HTTP to the same server",
    }


def _scale(b: _Bench) -> dict[str, Any]:
    """5. Many scopes in one run, against Prefect's default server."""
    prefect = b.prefect
    dsn = fresh_database(b.admin, "bench_scale")
    load_scopes(dsn, b.scale_scopes, 5)
    b.llm.reset(ANSWER)
    logged = prefect.log_path.stat().st_size
    wall, summary, run_id = asyncio.run(run_flow(settings_for(dsn, b.llm.api_base, b.concurrency)))
    wait_until_quiet(prefect.api_url)
    runs = task_runs_of(prefect.api_url, run_id)
    with open(prefect.log_path, encoding="utf-8", errors="replace") as log:
        log.seek(logged)
        trouble = server_trouble(log.read())
    flow_run = api(prefect.api_url, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [run_id]}}})
    return {
        "scopes": b.scale_scopes,
        "wall_s": round(wall, 2),
        "completed": summary["completed"],
        "flow_run_state": flow_run[0]["state"]["type"] if flow_run else None,
        "task_runs": len(runs),
        "task_runs_not_final": sum(
            r["state"] is None or r["state"]["type"] not in FINAL for r in runs
        ),
        "server_log": trouble,
        "bound": "no trouble in the server log, every task run final, all completed",
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("consolidation", __doc__, quick="100 scopes, a 300-episode backlog")
    args = cli.parse_args(argv)
    scopes, backlog_size = (100, 300) if args.quick else (1000, 2000)
    scale_scopes = 500 if args.quick else 10_000
    concurrency, delay = 16, 0.2

    result: dict[str, Any] = {"scopes": scopes, "episodes_per_scope": 5, "concurrency": concurrency}
    with admin_database(use_database_url=False) as admin, prefect_server() as prefect:
        llm = FakeLLMProcess()
        try:
            measure(
                result,
                admin,
                prefect,
                llm,
                scopes=scopes,
                backlog_size=backlog_size,
                scale_scopes=scale_scopes,
                concurrency=concurrency,
                delay=delay,
            )
        finally:
            llm.stop()
    full = not args.quick
    slow, bare = result["llm_200ms"], result["cpu_floor"]
    if "wall_over_ideal" in slow and "bare_200ms_wall_over_ideal" in bare:
        # the flow against litellm alone making the same kind of calls, in the same run
        slow["over_bare_litellm"] = round(
            slow["wall_over_ideal"] / bare["bare_200ms_wall_over_ideal"], 3
        )
    scaled = result["scale"]
    result["pass"] = (
        (
            min(
                result[name].get("wall_over_ideal", float("inf"))
                for name in ("llm_200ms", "llm_200ms_two_shards")
            )
            <= 1.3
            and result["rerun_unchanged"].get("llm_calls") == 0
            and result["backlog"].get("sent_over_conversation", float("inf")) <= 1.3
            and scaled.get("completed") == scale_scopes
            and scaled.get("task_runs_not_final") == 0
            and not any(scaled.get("server_log", {"error": 1}).values())
        )
        if full
        else None
    )
    return emit(result)


if __name__ == "__main__":
    sys.exit(main())
