"""Take docs/prefect-ui-consolidation.png from a real run: python docs/make_screenshot.py

Starts an embedded PostgreSQL and a `prefect server start`, records a few conversations, runs
the consolidation flow against that server, and has headless Chromium (Debian's `chromium`
package) photograph the flow run's page in the Prefect UI.
"""

from __future__ import annotations

import asyncio
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

from agent_memory_deployments.server import start_prefect_server  # noqa: E402
from benchmarks.consolidation import fresh_database  # noqa: E402
from benchmarks.database import admin_dsn  # noqa: E402

CONVERSATIONS = {
    "alex": "I'm a Python developer. I prefer async code. We deploy on Kubernetes.",
    "blake": "My timezone is CET. I prefer short answers.",
    "casey": "I work at a bakery. I hate long meetings.",
    "dana": "We use PostgreSQL 16. My editor is Neovim.",
    "emery": "I'm an SRE. I prefer dark mode.",
}


async def run(dsn: str) -> str:
    from agent_memory import MemoryManager, Scope
    from agent_memory.settings import DatabaseSettings, LLMSettings, Settings, use_settings
    from agent_memory_flows.consolidation import ConsolidationParams, consolidation_flow

    settings = Settings(db=DatabaseSettings(url=dsn), llm=LLMSettings(model=None))
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
    return str(state.state_details.flow_run_id)


async def screenshot(chromium: str, url: str, wait_for_text: str) -> bytes:
    """A PNG of ``url`` once its text shows ``wait_for_text``, through Chromium's DevTools
    protocol (a plain --screenshot fires before the single-page app has loaded its data)."""
    import base64
    import json
    import urllib.request

    import websockets

    from agent_memory_deployments.server import free_port

    port = free_port()
    browser = subprocess.Popen(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
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
            run_id = asyncio.run(run(dsn))
            out = ROOT / "docs" / "prefect-ui-consolidation.png"
            page = f"{server.url}/runs/flow-run/{run_id}"
            out.write_bytes(asyncio.run(screenshot(chromium, page, "write [user=")))
            print(out)
    finally:
        if pg is not None:
            pg.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
