"""Take the Prefect UI pictures of docs/ui.md from real runs: python docs/make_screenshot.py

Starts an embedded PostgreSQL and a `prefect server start`, records a few conversations, runs
the consolidation flow against that server through litellm and a loopback OpenAI-compatible
server (which refuses one scope's batch as over the model's context window, so the page shows a
failure as operators see one), then the decay flow, and has headless Chromium (Debian's
`chromium` package, in the dark colour scheme) photograph the flow run's page, its summary and
failures artifacts and the decay run's chart in the Prefect UI.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from agent_memory.private import keep_private  # noqa: E402

HOME = Path(tempfile.mkdtemp(prefix="am-screenshot-"))
os.environ.update(PREFECT_HOME=str(HOME / "prefect"))
keep_private()

from agent_memory_flows.prefect_server import start_prefect_server  # noqa: E402

# from the shared module, not a benchmark's: those lower Prefect's log level when imported
from benchmarks._common import admin_dsn, fresh_database  # noqa: E402
from benchmarks._prefect_api import api  # noqa: E402
from tests.fake_llm import FakeLLM, Reply, facts_answer  # noqa: E402

CONVERSATIONS = {
    "alex": "I'm a Python developer. I prefer async code. We deploy on Kubernetes.",
    "blake": "My timezone is CET. I prefer short answers.",
    "casey": "I work at a bakery. I hate long meetings.",
    "dana": "We use PostgreSQL 16. My editor is Neovim.",
    "emery": "I'm an SRE. I prefer dark mode.",
}


# the scope whose batch the loopback model refuses
REFUSED = "bakery"


def answer(request: dict[str, object]) -> Reply:
    """Facts from each user line, except for the refused scope: the provider's answer to a
    prompt over the model's context window."""
    if REFUSED in json.dumps(request):
        message = "This model's maximum context length is 8192 tokens; the messages had 9000."
        error = {"message": message, "type": "invalid_request_error"}
        return Reply(
            status=400, body=json.dumps({"error": {**error, "code": "context_length_exceeded"}})
        )
    return facts_answer(request)


async def run(dsn: str, llm: FakeLLM) -> tuple[str, str]:
    """The consolidation run (one scope failed) and then the decay run: their ids."""
    from pydantic import SecretStr

    from agent_memory import MemoryManager, Scope
    from agent_memory.settings import DatabaseSettings, LLMSettings, Settings, use_settings
    from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow
    from agent_memory_flows.decay import DecayParams, decay_flow

    llm_settings = LLMSettings(
        model="openai/gpt-4o-mini", api_base=llm.api_base, api_key=SecretStr("sk-screenshot")
    )
    settings = Settings(db=DatabaseSettings(url=dsn), llm=llm_settings)
    use_settings(settings)
    manager = await MemoryManager.create(settings=settings)
    try:
        for user, text in CONVERSATIONS.items():
            await manager.record(
                Scope(user_id=user, agent_id="support"),
                [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}],
            )
    finally:
        await manager.close()
    state = await consolidation_flow(ConsolidationParams(), return_state=True)
    if not state.is_failed():
        raise RuntimeError(f"the run was to fail the {REFUSED!r} scope: {state!r}")
    decay = await decay_flow(DecayParams(), return_state=True)
    return str(state.state_details.flow_run_id), str(decay.state_details.flow_run_id)


async def screenshot(chromium: str, url: str, wait_for_text: str) -> bytes:
    """A PNG of ``url`` once its text shows ``wait_for_text``, through Chromium's DevTools
    protocol (a plain --screenshot fires before the single-page app has loaded its data)."""
    import base64
    import json
    import urllib.request

    import websockets

    from agent_memory_flows.prefect_server import free_port

    port = free_port()
    browser = subprocess.Popen(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            # nothing but the local UI: no updates, no Google services, no first-run pages
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1600,1000",
            f"--remote-debugging-port={port}",
            f"--user-data-dir={HOME / 'chromium'}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as r:
                    targets = [t for t in json.load(r) if t["type"] == "page"]
                if targets:
                    break
            except OSError:
                pass
            await asyncio.sleep(0.2)
        async with websockets.connect(targets[0]["webSocketDebuggerUrl"], max_size=None) as ws:
            ids = iter(range(1, 10_000))

            async def call(method: str, **params: object) -> dict[str, object]:
                n = next(ids)
                await ws.send(json.dumps({"id": n, "method": method, "params": params}))
                while True:
                    message = json.loads(await ws.recv())
                    if message.get("id") == n:
                        return dict(message.get("result", {}))

            # the UI in its dark scheme, as operators who chose it see the pictures on it
            dark = [{"name": "prefers-color-scheme", "value": "dark"}]
            await call("Emulation.setEmulatedMedia", features=dark)
            await call("Page.navigate", url=url)
            for _ in range(120):
                result = await call("Runtime.evaluate", expression="document.body.innerText")
                if wait_for_text in str(result.get("result", {})):
                    break
                await asyncio.sleep(0.5)
            await asyncio.sleep(2)  # let the charts finish drawing
            shot = await call("Page.captureScreenshot", format="png")
            return base64.b64decode(str(shot["data"]))
    finally:
        browser.terminate()
        browser.wait(timeout=30)


def main() -> int:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("needs Chromium: apt-get install chromium", file=sys.stderr)
        return 2
    admin, pg = admin_dsn(use_database_url=False)
    try:
        dsn = fresh_database(admin, "screenshot")
        with start_prefect_server(home=HOME / "prefect") as server:
            os.environ["PREFECT_API_URL"] = server.api_url
            llm = FakeLLM().start()
            llm.reset(answer)
            try:
                run_id, decay_id = asyncio.run(run(dsn, llm))
            finally:
                llm.stop()

            def artifact(key: str, of_run: str) -> str:
                found = api(
                    server.api_url,
                    "/artifacts/filter",
                    {
                        "artifacts": {"key": {"any_": [key]}},
                        "flow_runs": {"id": {"any_": [of_run]}},
                    },
                )
                return f"{server.url}/artifacts/artifact/{found[0]['id']}"

            shots = {
                "prefect-ui-consolidation.png": (f"{server.url}/runs/flow-run/{run_id}", "fail ["),
                "prefect-ui-consolidation-summary.png": (
                    artifact("memory-consolidation-summary", run_id),
                    "cost_usd",
                ),
                "prefect-ui-consolidation-failures.png": (
                    artifact("memory-consolidation-failures", run_id),
                    "To retry them now",
                ),
                "prefect-ui-decay-chart.png": (
                    artifact("memory-decay-chart", decay_id),
                    "projected survival",
                ),
            }
            for name, (url, wait_for) in shots.items():
                out = ROOT / "docs" / name
                out.write_bytes(asyncio.run(screenshot(chromium, url, wait_for)))
                print(out)
    finally:
        if pg is not None:
            pg.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
