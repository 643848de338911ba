"""Benchmarks: one command, JSON figures, each a ratio to a reference measured in the same run."""
