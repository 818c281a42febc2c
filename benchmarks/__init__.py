"""Benchmarks that print figures (never timed tests). Run: python -m benchmarks --help."""
