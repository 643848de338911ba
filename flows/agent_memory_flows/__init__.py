"""Prefect flows: consolidation and decay. Orchestration only; the steps live in ``tasks``."""
