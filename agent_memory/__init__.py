"""agent-memory: memory that lasts across sessions for LangGraph agents.

Importing this package does not import Prefect or litellm: an agent that only injects and
records pays for neither.
"""

from agent_memory.errors import (
    AgentMemoryError,
    ConfigurationError,
    DatabaseUnavailableError,
    EpisodeTooLargeError,
    ExtractionError,
    ExtractorSetupError,
    InvalidMessageError,
    InvalidScopeError,
    MigrationError,
    TransientExtractionError,
)
from agent_memory.graph.state import MemoryState
from agent_memory.manager import MemoryManager
from agent_memory.models import Fact, MemoryItem, Scope, WorkingMemoryFrame
from agent_memory.settings import Settings

__version__ = "0.1.0"

__all__ = [
    "AgentMemoryError",
    "ConfigurationError",
    "DatabaseUnavailableError",
    "EpisodeTooLargeError",
    "ExtractionError",
    "ExtractorSetupError",
    "Fact",
    "InvalidMessageError",
    "InvalidScopeError",
    "MemoryItem",
    "MemoryManager",
    "MemoryState",
    "MigrationError",
    "Scope",
    "Settings",
    "TransientExtractionError",
    "WorkingMemoryFrame",
    "__version__",
]
