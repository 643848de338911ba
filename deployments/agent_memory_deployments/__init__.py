"""Schedules: the deployments of the flows, for ``agent-memory serve`` and ``prefect.yaml``."""
