"""The consolidation benchmark's runs (benchmarks/consolidation.py): the backlog it loads, the
settings of a run, one flow run timed, shard workers run side by side, and the floors under it
(bare litellm calls, plain HTTP to the same loopback server)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from benchmarks._common import machine_busy, machine_cpu, prefect_defaults

os.environ.update(prefect_defaults())

import psycopg
from pydantic import SecretStr

from agent_memory.settings import DatabaseSettings, LLMSettings, Settings, use_settings

if TYPE_CHECKING:
    from agent_memory_flows.params import ConsolidationParams
    from tests.fake_llm import FakeLLMProcess

ANSWER = json.dumps([{"content": "User likes benchmarks.", "importance": 0.6}])


def load_scopes(dsn: str, scopes: int, per_scope: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO agent_memory.episodes (user_id, messages, message_count, occurred_at)
               SELECT 'user-' || s, jsonb_build_array(
                        jsonb_build_object('role', 'user', 'content',
                          'I prefer tool number ' || e || ' for project ' || s || '.'),
                        jsonb_build_object('role', 'assistant', 'content', 'Noted.')),
                      2, now() - (e || ' minutes')::interval
               FROM generate_series(1, %s) AS s, generate_series(1, %s) AS e""",
            (scopes, per_scope),
        )


def settings_for(dsn: str, api_base: str, concurrency: int) -> Settings:
    return Settings(
        db=DatabaseSettings(url=SecretStr(dsn), pool_min_size=1, pool_max_size=concurrency + 2),
        llm=LLMSettings(
            model="openai/bench-model",
            api_base=api_base,
            api_key=SecretStr("sk-bench"),
            max_concurrency=concurrency,
            timeout=30,
        ),
    )


async def run_flow(
    settings: Settings, params: ConsolidationParams | None = None
) -> tuple[float, dict[str, Any], str]:
    """Wall seconds, the run's summary and its flow run id."""
    from agent_memory.errors import ScopesFailedError
    from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow

    use_settings(settings)
    started = time.perf_counter()
    params = params or ConsolidationParams(max_scopes=1_000_000)
    state = await consolidation_flow(params, return_state=True)
    wall = time.perf_counter() - started
    result = await state.aresult(raise_on_failure=False)
    if isinstance(result, ScopesFailedError):
        result = result.summary
    elif isinstance(result, BaseException):
        raise result
    return wall, dict(result), str(state.state_details.flow_run_id)


def timed_flow(settings: Settings) -> tuple[float, float, dict[str, Any]]:
    """Wall seconds, this process's CPU seconds (all threads) and the run's summary."""
    cpu = time.process_time()
    wall, summary, _run = asyncio.run(run_flow(settings))
    return wall, time.process_time() - cpu, summary


def bare_litellm(llm: FakeLLMProcess, calls: int, concurrency: int) -> tuple[float, float]:
    """``calls`` bare litellm calls, ``concurrency`` at a time, against the same loopback
    server (no Prefect, no database): the CPU milliseconds one costs this process, and the
    wall seconds they took. The floor under what the flow can do with the same calls."""
    import litellm

    async def run() -> tuple[float, float]:
        limit = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with limit:
                await litellm.acompletion(
                    model="openai/bench-model",
                    api_base=llm.api_base,
                    api_key="sk-bench",
                    messages=[{"role": "user", "content": "I prefer tool number 1. " * 8}],
                )

        await asyncio.gather(*(one() for _ in range(concurrency)))  # warm the client
        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        return (time.process_time() - cpu) / calls * 1000, time.perf_counter() - started

    return asyncio.run(run())


def bare_http(llm: FakeLLMProcess, calls: int, concurrency: int) -> float:
    """Wall seconds of ``calls`` plain HTTP requests to the loopback server, ``concurrency``
    at a time on pooled connections: the server's own distance from the ideal."""
    import httpx

    body = {"model": "bench-model", "messages": [{"role": "user", "content": "I prefer 1."}]}

    async def run() -> float:
        limit = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=60) as client:

            async def one() -> None:
                async with limit:
                    reply = await client.post(f"{llm.api_base}/chat/completions", json=body)
                    reply.raise_for_status()

            await asyncio.gather(*(one() for _ in range(concurrency)))  # open the connections
            started = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(calls)))
            return time.perf_counter() - started

    return asyncio.run(run())


def shard_workers(
    dsn: str, warm: str, llm: FakeLLMProcess, count: int, concurrency: int, delay: float
) -> tuple[list[dict[str, Any]], float | None]:
    """Each of ``count`` shard workers' run (benchmarks/_shard_worker.py, ``concurrency``
    shared among them; started together once all are warm, the LLM answering after ``delay``)
    and the share of the machine's cores busy meanwhile."""
    import subprocess

    worker = [sys.executable, "-m", "benchmarks._shard_worker", dsn, warm, llm.api_base]
    workers = [
        subprocess.Popen(
            [*worker, str(k), str(count), str(concurrency // count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(count)
    ]
    try:
        for w in workers:
            assert w.stdout is not None
            line = w.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a shard worker did not start: {line!r}")
        llm.reset(ANSWER, delay_s=delay)  # the warm-up's calls are not counted
        machine = machine_cpu()
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        runs = [json.loads(w.communicate(timeout=600)[0].splitlines()[-1]) for w in workers]
        busy = machine_busy(machine)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    return runs, busy
