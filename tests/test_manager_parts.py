"""The manager is one object made of parts: its public methods are the parts', forwarded, with
the same names, sync or async as before, signatures and docstrings (what callers, type
checkers and the API reference read)."""

from __future__ import annotations

import inspect

import pytest

from agent_memory.forwarding import forward
from agent_memory.inject import Injector
from agent_memory.manager import MemoryManager

ASYNC = [
    "record",
    "record_many",
    "episodes",
    "facts",
    "inject",
    "search",
    "search_conversations",
    "index_pending",
    "erase",
    "erase_user",
    "create_tenant",
    "drop_tenant",
    "tenants",
    "readable_facts",
    "readable_fact",
    "add_fact",
    "update_fact",
    "forget_fact",
    "export",
    "export_user",
    "consolidate",
    "decay",
    "close",
    "create",
]
SYNC = [
    "record_sync",
    "inject_sync",
    "index_pending_sync",
    "close_sync",
    "create_sync",
    "graph",
    "checkpointer",
    "checkpointer_sync",
    "store",
    "tools",
]


@pytest.mark.parametrize("name", ASYNC + SYNC)
def test_every_public_method_is_there_sync_or_async_as_before(name: str) -> None:
    method = getattr(MemoryManager, name)
    assert inspect.iscoroutinefunction(method) == (name in ASYNC)
    assert method.__qualname__ == f"MemoryManager.{name}"
    assert method.__module__ == "agent_memory.manager"
    assert method.__doc__ or name in ("record_sync", "close_sync")


def test_a_forwarded_method_is_the_parts_own_on_an_instance_and_documented_on_the_class() -> None:
    class Part:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        async def ask(self, text: str, *, twice: bool = False) -> str:
            """Ask the part."""
            return f"{self.tag}:{text * (2 if twice else 1)}"

        def ask_sync(self, text: str) -> str:
            """Ask the part without a loop."""
            return f"{self.tag}:{text}"

    class Whole:
        ask = forward("_part", Part.ask)
        ask_sync = forward("_part", Part.ask_sync)

        def __init__(self, tag: str) -> None:
            self._part = Part(tag)

    one, two = Whole("one"), Whole("two")
    assert one.ask_sync("x") == "one:x" and two.ask_sync("x") == "two:x"
    assert one.ask.__self__ is one._part  # the bound method itself: no call in between
    assert inspect.signature(Whole.ask) == inspect.signature(Part.ask)
    assert Whole.ask.__doc__ == "Ask the part." and inspect.iscoroutinefunction(Whole.ask)
    assert not inspect.iscoroutinefunction(Whole.ask_sync)
    assert Whole.ask_sync.__qualname__.endswith("Whole.ask_sync")


def test_a_forward_under_another_name_is_refused() -> None:
    # Python 3.11 wraps an error of __set_name__ in a RuntimeError (its cause); 3.12 does not
    with pytest.raises((TypeError, RuntimeError)) as refused:

        class Whole:
            recall = forward("_injector", Injector.inject)

    error = refused.value.__cause__ or refused.value
    assert isinstance(error, TypeError)
    assert "Whole.recall forwards to a method named inject" in str(error)
