"""Benchmarks (kept out of ``make test``): ``make bench``; results in BENCHMARKS.md."""
