"""Benchmarks: `python -m bench.run` (see bench/README.md)."""
