"""The benchmarks' PostgreSQL: DATABASE_URL when set, else a throwaway embedded server."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any


def admin_dsn(*, use_database_url: bool = True) -> tuple[str, Any]:
    """A DSN for creating benchmark databases, and the embedded server to clean up (or None)."""
    url = os.environ.get("DATABASE_URL")
    if url and use_database_url:
        return url, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR warning on import
        import pgserver

        server = pgserver.get_server(  # type: ignore[attr-defined]
            Path(tempfile.mkdtemp(prefix="am-bench-")) / "pgdata", cleanup_mode="delete"
        )
    return str(server.get_uri()), server
