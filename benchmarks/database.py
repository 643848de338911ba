"""The benchmarks' PostgreSQL, as it was imported from here: the helpers live in
benchmarks/_common.py (import them from there); docs/make_screenshot.py still takes
``admin_dsn`` from this module."""

from __future__ import annotations

from benchmarks._common import admin_dsn, drop_database, fresh_database

__all__ = ["admin_dsn", "drop_database", "fresh_database"]
