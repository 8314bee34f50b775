"""Benchmark drivers, the TPC-C workload, A/B orchestration, statistics and reports for
`hpadvise validate`; target.py is the interface an engine implements to be validated."""
