"""Benchmark cases: every module here exposes ``CASES: list[bench.harness.Case]``."""
