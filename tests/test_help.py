"""Help that reads as written at 80 columns: no reST markup, every option described, no option
or word cut with an ellipsis, no sentence broken in the middle of a line; the tools' descriptions
and the API reference's docstrings without raw markup either."""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

import pytest

from tests.cli_commands import command_at, every_command
from tests.processes import run_interpreter

RAW = re.compile(r"``|:[a-z]+:`")
PAGES = every_command(groups=True)
WIDTH = 80

PRINT_EVERY_HELP = """
from agent_memory_deployments.cli import app
from tests.cli_commands import every_command

for path in every_command(groups=True):
    print("=====", " ".join(path), flush=True)
    try:
        app([*path, "--help"], prog_name="agent-memory")
    except SystemExit:
        pass
"""


@pytest.mark.parametrize("path", PAGES, ids=lambda p: " ".join(p) or "agent-memory")
def test_every_command_and_option_is_described_in_plain_words(path: list[str]) -> None:
    command = command_at(path)
    text = command.help or ""
    assert text.strip(), f"{path}: no help"
    assert not RAW.search(text), text
    # a paragraph is one line: the terminal wraps it (a line break from the docstring would
    # break a sentence in the middle)
    assert all("\n" not in p for p in text.split("\n\n")), text
    for param in command.params:
        if param.name == "help":
            continue
        helped: Any = getattr(param, "help", None)
        assert helped and not RAW.search(helped), f"{path}: {param.name} has no plain help"
        assert not param.secondary_opts, f"{path}: {param.opts} has a --no- twin (it is cut)"


def _pages(output: str) -> dict[str, list[str]]:
    pages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in output.splitlines():
        if line.startswith("===== "):
            current = pages.setdefault(line[6:].strip() or "agent-memory", [])
        else:
            current.append(line)
    return pages


def _broken(lines: list[str]) -> list[str]:
    """Lines of running text (outside the boxes) that end although the next line's first word
    would have fitted: a line break from the source, not the terminal's."""
    found = []
    for line, after in itertools.pairwise(lines):
        text, following = line.rstrip(), after.strip()
        if not text.strip() or not following or "│" in line + after or "Usage:" in line:
            continue
        if len(text) + 1 + len(following.split()[0]) < WIDTH - 1:
            found.append(f"{text!r} / {following!r}")
    return found


@pytest.mark.system
def test_every_help_page_reads_whole_at_80_columns() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    env.update(COLUMNS=str(WIDTH), LINES="50", TERM="dumb", NO_COLOR="1")
    result = run_interpreter(["-c", PRINT_EVERY_HELP], env)
    assert result.returncode == 0, result.stderr
    pages = _pages(result.stdout)
    assert len(pages) == len(PAGES)
    for name, lines in pages.items():
        page = "\n".join(lines)
        assert "Usage: agent-memory" in page, name
        assert "\u2026" not in page, f"{name}: something is cut:\n{page}"
        assert not RAW.search(page), f"{name}: raw markup:\n{page}"
        assert max(len(line) for line in lines) <= WIDTH, f"{name}:\n{page}"
        assert not _broken(lines), f"{name}: {_broken(lines)}"
    # the words a user of the wheel has: no path into the repository
    assert "docs/" not in pages["backfill import"] and "examples/" not in pages["backfill import"]
    assert "seed" not in "\n".join(pages["demo"])


def test_the_tools_are_described_in_one_line_each(settings: Any) -> None:
    from agent_memory.tools import memory_tools

    class Holder:  # the tools read the manager only when called
        pass

    holder: Any = Holder()
    holder.settings = settings
    for tool in memory_tools(holder, holder):
        assert tool.description and "\n" not in tool.description, tool.description
        assert "  " not in tool.description and not RAW.search(tool.description)


def _docstrings() -> dict[str, str]:
    """Every docstring the API reference page renders (docs/api.md's ``:::`` objects and their
    public members, inherited ones too), by the object's path, as mkdocstrings loads them."""
    import griffe

    loader = griffe.GriffeLoader(search_paths=[".", "flows", "tasks", "deployments"])
    loader.load("agent_memory")
    loader.resolve_aliases(implicit=False, external=None)
    found: dict[str, str] = {}

    def walk(obj: Any) -> None:
        if obj.path in found:
            return
        found[obj.path] = obj.docstring.value if obj.docstring else ""
        if obj.is_alias:
            obj = obj.final_target
        members = obj.all_members if obj.is_class else obj.members
        for name, member in members.items():
            if not name.startswith("_") and not (obj.is_module and member.is_alias):
                walk(member)

    with open("docs/api.md", encoding="utf-8") as page:
        for line in page:
            if line.startswith(":::"):
                walk(loader.modules_collection[line.split(":::")[1].strip()])
    return found


def test_the_api_reference_renders_no_raw_roles() -> None:
    docstrings = _docstrings()
    assert "agent_memory.manager.MemoryManager.create" in docstrings  # the walk reached members
    roles = {path: re.findall(r":[a-z]+:`[^`]*`", doc) for path, doc in docstrings.items()}
    assert {path: found for path, found in roles.items() if found} == {}
