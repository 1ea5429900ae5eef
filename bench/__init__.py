"""Benchmarks of the executor daemon against the reference ``codex exec-server``."""
