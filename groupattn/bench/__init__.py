"""Benchmarks as a command: ``groupattn bench [CASE ...] [--json FILE]``.

Every case measures a subject against a reference in its own process — time of a
forward pass and of a training step, resident-memory peak of each, and for models the
arithmetic (FLOPs) — and reports subject ÷ reference ratios.
"""

from ._cases import (
    MIN_PEAK_MIB,
    PUBLISHED_GSA,
    BenchCase,
    Measurement,
    bench_cases,
    best_time,
    interleaved_best_times,
    run_bench_case,
)
from ._command import run_benchmarks, select_cases

__all__ = [
    "MIN_PEAK_MIB",
    "PUBLISHED_GSA",
    "BenchCase",
    "Measurement",
    "bench_cases",
    "best_time",
    "interleaved_best_times",
    "run_bench_case",
    "run_benchmarks",
    "select_cases",
]
