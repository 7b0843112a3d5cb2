"""``groupattn bench``: each case in its own process, with peak memory, as ratios to a reference."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from .._atomic import write_atomic
from .._command_line import UsageError, check_output_path, json_text, run_command

__all__ = ["register", "run_benchmarks", "select_cases"]


def select_cases(names: list[str] | None) -> list[str]:
    """Case names for ``names`` — case names or families (``gsa``, ``models``,
    ``certify``, ``attention``); all cases when empty.

    Raises
    ------
    UsageError
        For a name that is neither.
    """
    from ._cases import bench_cases

    cases = bench_cases()
    families: dict[str, list[str]] = {}
    for case in cases.values():
        for family in case.groups:
            families.setdefault(family, []).append(case.name)
    if not names:
        return list(cases)
    chosen: list[str] = []
    for name in names:
        if name in cases:
            picked = [name]
        elif name in families:
            picked = families[name]
        else:
            raise UsageError(
                f"expected a case or family name ({', '.join(sorted(families))}; `groupattn bench --list` "
                f"lists the cases), got {name!r}"
            )
        chosen += [p for p in picked if p not in chosen]
    return chosen


def _run_in_child(name: str, repeats: int, threads: int) -> dict[str, Any]:
    """Run one case in a fresh Python process; its record is the last line it prints."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(
        [sys.executable, "-m", "groupattn.bench._child", name, str(repeats), str(threads)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"case": name, "error": f"exit {done.returncode}: {tail}"}
    return dict(json.loads(lines[-1]))


def _format(record: dict[str, Any]) -> str:
    if "error" in record:
        return f"{record['case']:<26} failed: {record['error']}"
    ratios = record.get("ratios", {})

    def cell(key: str) -> str:
        value = ratios.get(key)
        return "–" if value is None else f"{value:.3g}×"

    if "certify_s" in record.get("subject", {}):
        subject = record["subject"]
        return (
            f"{record['case']:<26} certify {subject['certify_s']:.3g} s ({subject['status']}), "
            f"{cell('time')} one forward pass"
        )
    text = (
        f"{record['case']:<26} time fwd {cell('time_forward')}, train {cell('time_train')}; "
        f"memory fwd {cell('memory_forward')}, train {cell('memory_train')}"
    )
    if "flops_forward" in ratios:
        text += f"; FLOPs fwd {cell('flops_forward')}, train {cell('flops_train')}"
    return text


def run_benchmarks(
    names: list[str] | None = None, repeats: int = 3, threads: int = 2, echo: bool = True
) -> list[dict[str, Any]]:
    """Run the cases ``names`` (see [`select_cases`][groupattn.bench.select_cases]), each in its own process.

    Returns
    -------
    list of dict
        One record per case: ``subject`` and ``reference_side`` measurements (seconds,
        MiB, FLOPs), ``ratios`` subject ÷ reference, ``speedup_*`` their inverses; or
        ``error`` for a case whose process failed.
    """
    records = []
    for name in select_cases(names):
        record = _run_in_child(name, repeats, threads)
        records.append(record)
        if echo:
            print(_format(record), flush=True)
    return records


def _bench(args: argparse.Namespace) -> int:
    from ._cases import bench_cases

    if args.list:
        for case in bench_cases().values():
            print(f"{case.name:<26} {case.description} — against {case.reference}")
        return 0
    names = select_cases(args.cases)
    if args.repeats < 1:
        raise UsageError(f"expected --repeats >= 1, got {args.repeats}")
    cores = os.cpu_count() or 1
    if args.threads is not None and not 1 <= args.threads <= 4 * cores:
        raise UsageError(
            f"expected --threads between 1 and {4 * cores} (4 per core), got {args.threads}"
        )
    json_path = check_output_path(args.json, "--json")
    threads = args.threads if args.threads is not None else 2
    records = run_benchmarks(names, args.repeats, threads)
    if json_path is not None:
        write_atomic(
            json_path, json_text({"threads": threads, "repeats": args.repeats, "cases": records})
        )
    return 1 if any("error" in r for r in records) else 0


def _run(args: argparse.Namespace) -> int:
    return run_command("bench", _bench, args)


def register(subparsers: Any) -> None:
    """Add the ``bench`` subcommand to the ``groupattn`` parser."""
    p = subparsers.add_parser(
        "bench",
        help="measure layers, models and the checker against their references, each case in its own process",
        description=(
            "Each case runs in a fresh Python process: best time of a forward pass and of a training step "
            "(forward + backward), and the process's resident-memory peak of each, for the subject and its "
            "reference; the ratios are subject / reference. gsa_* cases compare against the published GSA-Nets "
            "layers' figures measured on a 2-core machine (fixed numbers); models against their baselines, with "
            "the ratio of their arithmetic (FLOPs) beside the ratio of their times."
        ),
        epilog="exit codes: 0 all cases ran, 1 a case's process failed (its line says why), 2 bad arguments",
    )
    p.add_argument(
        "cases",
        nargs="*",
        metavar="CASE",
        help="case names or families (gsa, attention, models, certify); default: all",
    )
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--json", metavar="FILE", help="write every case's record as JSON")
    p.add_argument(
        "--repeats", type=int, default=3, help="timed runs per measurement after a warm-up"
    )
    p.add_argument(
        "--threads", type=int, default=None, metavar="N", help="threads per case (default 2)"
    )
    p.add_argument("--debug", action="store_true", help="print the traceback of an error")
    p.set_defaults(func=_run)
