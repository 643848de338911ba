"""What the server's pgvector can do. A feature that needs a newer pgvector than the server has
says so in one line, naming the version found and the one needed, and the caller takes the
older path (or, where there is none, refuses with that line)."""

from __future__ import annotations

import logging
import threading
from typing import Literal

log = logging.getLogger(__name__)

Version = tuple[int, ...]

# what a vector is compared (and indexed) as: four bytes a dimension, or two
VectorType = Literal["vector", "halfvec"]
# the most dimensions pgvector's HNSW index takes of each type
INDEX_DIMS: dict[VectorType, int] = {"vector": 2000, "halfvec": 4000}

# each feature: the first pgvector that has it, and what it is called in the line
NEEDS: dict[str, tuple[Version, str]] = {
    "halfvec": ((0, 7), "the halfvec type"),
    "iterative_scan": ((0, 8), "an iterative index scan (hnsw.iterative_scan)"),
}

_told: set[tuple[str, Version]] = set()
_told_lock = threading.Lock()


def parse(text: str) -> Version:
    """``0.8.5`` as ``(0, 8, 5)`` (a suffix such as ``-dev`` is dropped)."""
    parts = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def label(version: Version) -> str:
    return ".".join(map(str, version))


def has(version: Version, feature: str) -> bool:
    """Whether pgvector ``version`` has ``feature`` (a key of :data:`NEEDS`)."""
    return version >= NEEDS[feature][0]


def lacking(version: Version, feature: str, instead: str = "") -> str:
    """The line that says ``feature`` needs a newer pgvector than ``version``; ``instead``:
    what is done without it."""
    needed, name = NEEDS[feature]
    line = f"{name} needs pgvector {label(needed)} or later; this server has {label(version)}"
    return f"{line}: {instead}" if instead else line


def tell_once(version: Version, feature: str, instead: str) -> None:
    """Log :func:`lacking` once per process for this version and feature."""
    with _told_lock:
        if (feature, version) in _told:
            return
        _told.add((feature, version))
    log.warning("%s", lacking(version, feature, instead))
