"""Benchmarks behind ``rt bench``; results are written to ``docs/BENCHMARKS.md``."""
