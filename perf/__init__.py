"""Reproducible performance benchmarks (not part of the test suite)."""
