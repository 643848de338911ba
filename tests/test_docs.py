"""The docs say what the code does: the configuration page is generated from the settings and
current, the Python blocks of the README and the docs run, and every ``agent-memory`` command
they show exists with the options they give it."""

from __future__ import annotations

import ast
import asyncio
import os
import re
import runpy
import shlex
from pathlib import Path
from typing import Any

import psycopg
import pytest
import typer
from langchain_core.messages import AIMessage

from agent_memory_deployments.cli import app
from tests.processes import run_interpreter

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!--[^\n]*-->\n)?```(\w*)\n(.*?)```", re.S)


def blocks(language: str) -> list[tuple[str, str]]:
    """(where, code) of each block in ``language``, but those a comment says run elsewhere."""
    found = []
    for page in PAGES:
        for match in BLOCK.finditer(page.read_text()):
            note, lang, code = match.groups()
            if lang == language and not (note and "run" in note):
                found.append((f"{page.name}:{code.splitlines()[0][:40]}", code))
    return found


def test_the_configuration_page_is_generated_from_the_settings_and_current() -> None:
    generator = runpy.run_path(str(ROOT / "docs" / "gen_configuration.py"))
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == generator["render"](), "run: python docs/gen_configuration.py"
    for name in ("AGENT_MEMORY_INJECT_RANKING", "DATABASE_URL", "AGENT_MEMORY_RETRY_LLM_ATTEMPTS"):
        assert f"`{name}`" in page


def my_agent(state: dict[str, Any]) -> dict[str, Any]:
    """The agent the README's graph example names: it answers, having read its memory."""
    assert "working_memory" in state
    return {"messages": [AIMessage("Noted.")]}


def whole_program(where: str, code: str) -> bool:
    """A block to run as written, in an interpreter of its own: every block of the README (a
    reader copies it into a file), and any other that runs its own event loop."""
    return where.startswith("README.md:") or "asyncio.run(" in code


def test_the_readme_s_python_blocks_are_whole_programs() -> None:
    readme = [(where, code) for where, code in blocks("python") if where.startswith("README")]
    assert len(readme) >= 2
    for where, code in readme:
        compile(code, where, "exec")  # no top-level await: it runs as a file runs
        assert "my_agent" not in code or "def my_agent(" in code, where


def run_as_written(code: str, database_url: str) -> str:
    """``python -c CODE`` against the test's database and Prefect server; its output."""
    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
    }
    result = run_interpreter(["-c", code], env, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Traceback" not in output, output
    return result.stdout


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize(("where", "code"), blocks("python"), ids=lambda v: str(v)[:40])
async def test_python_blocks_run(
    where: str,
    code: str,
    database_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if whole_program(where, code):
        output = await asyncio.to_thread(run_as_written, code, database_url)
        assert output.strip(), "the program shows what it got"
    else:
        monkeypatch.setenv("DATABASE_URL", database_url)
        from agent_memory.settings import use_settings

        use_settings(None)  # the block reads the environment, as a user's program would
        compiled = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(compiled, {"my_agent": my_agent})  # the docs' own code
        if result is not None:
            await result
    facts = db.execute("SELECT content FROM agent_memory.memory_items").fetchall()
    assert facts == [("User is a Python developer.",)]


async def test_the_mcp_tools_the_docs_name_are_the_server_s() -> None:
    from agent_memory import Scope
    from agent_memory.settings import Settings
    from agent_memory_deployments.mcp_server import build_server

    server = build_server(Settings(), Scope("docs"))
    names = sorted(tool.name for tool in await server.list_tools())
    for page in (ROOT / "README.md", ROOT / "docs" / "guide.md"):
        text = page.read_text()
        named = sorted(n for n in re.findall(r"`(\w+)`", text) if n in names)
        assert set(named) == set(names), f"{page.name} names {named}, the server has {names}"


def _options(command: Any) -> set[str]:
    return {o for p in command.params for o in getattr(p, "opts", [])}


def _check(line: str, where: str) -> int:
    """Check one ``agent-memory ...`` line (a synopsis: ``|`` separates alternatives, ``[...]``
    optional parts); how many commands it named."""
    root: Any = typer.main.get_command(app)  # a group: it has commands
    rest = re.sub(r"\s+#.*$", "", line).split("agent-memory", 1)[1]
    checked, command, parent = 0, None, root
    for alternative in rest.split(" | "):
        tokens = shlex.split(alternative.replace("[", " ").replace("]", " "))
        if tokens and not tokens[0].startswith("-"):
            # "server status | stop": an alternative may be a sibling of the command before it
            command = parent if tokens[0] in getattr(parent, "commands", {}) else root
            while tokens and tokens[0] in getattr(command, "commands", {}):
                parent, command = command, command.commands[tokens.pop(0)]
            group = hasattr(command, "commands")
            assert not (group and tokens and not tokens[0].startswith("-")), (
                f"{where}: no command {tokens[0]!r} in {line!r}"
            )
            checked += 1
        assert command is not None, f"{where}: {line!r} names no command"
        for option in (t.split("=")[0] for t in tokens if t.startswith("--")):
            assert option in _options(command), f"{where}: {command.name} has no {option}"
    return checked


def test_every_command_the_docs_show_exists_with_its_options() -> None:
    checked = 0
    for where, code in blocks("bash") + blocks(""):
        for line in code.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ").removeprefix(".venv/bin/")
            if line.startswith("agent-memory "):
                checked += _check(line, where)
    assert checked >= 20  # the README's and the commands page's synopses, and the examples
