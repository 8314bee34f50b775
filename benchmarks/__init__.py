"""Benchmark drivers and A/B orchestration for `hpadvise validate` (issue 4; not built yet)."""
