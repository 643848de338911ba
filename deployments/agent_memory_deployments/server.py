"""A local ``prefect server start`` as a child process: its home is
:mod:`agent_memory_flows.prefect_server` (a flow run started from Python starts one too); its
names here for the command line, the benchmarks and the tests."""

from agent_memory_flows.prefect_server import (
    PrefectServer,
    free_port,
    prefect_database_url,
    start_prefect_server,
)

__all__ = ["PrefectServer", "free_port", "prefect_database_url", "start_prefect_server"]
