"""What an `agent_memory.store.AgentMemoryStore` runs over: its ``manager`` (a
`agent_memory.manager.MemoryManager`), of which it uses the backend only; and what its
``from_conn_string`` opens.

The store does not import the manager (the manager imports the store, for ``manager.store()``):
``agent_memory.manager`` names itself here as the opener when it is imported, which every
``import agent_memory...`` does first (the package imports it).
"""

from __future__ import annotations

from typing import Protocol

from agent_memory.backend import Backend
from agent_memory.errors import ConfigurationError
from agent_memory.settings import Settings


class StoreHost(Protocol):
    """What a store runs over: a manager, with its backend, closed by the store that opened
    it."""

    @property
    def backend(self) -> Backend: ...

    async def close(self) -> None: ...

    def close_sync(self) -> None: ...


class HostOpener(Protocol):
    """What opens a store's manager for ``from_conn_string``: ``MemoryManager`` itself."""

    async def create(
        self, database_url: str | None = None, *, settings: Settings | None = None
    ) -> StoreHost: ...

    def create_sync(
        self, database_url: str | None = None, *, settings: Settings | None = None
    ) -> StoreHost: ...


_opener: list[HostOpener] = []


def opens(opener: HostOpener) -> None:
    """Make ``opener`` what ``AgentMemoryStore.from_conn_string`` opens (the manager's module
    calls this)."""
    _opener[:] = [opener]


def opener() -> HostOpener:
    if not _opener:  # only when agent_memory.manager failed to import
        raise ConfigurationError("no MemoryManager to open: agent_memory.manager is not imported")
    return _opener[0]
