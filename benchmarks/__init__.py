"""Benchmarks: the same workloads on stargraph, LangGraph and plain Python.

Run ``python -m benchmarks`` (or ``make bench``); ``--quick`` for a short run, ``--only NAME``
for one workload. Workloads are defined in :mod:`benchmarks.workloads`; the timing harness
and report are in :mod:`benchmarks.core_harness`.
"""
