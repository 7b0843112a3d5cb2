"""One ``groupattn bench`` case in its own process: ``python -m groupattn.bench._child NAME REPEATS THREADS``."""

from __future__ import annotations

import json
import sys

import torch

from ._cases import run_bench_case


def main(argv: list[str]) -> int:
    name, repeats, threads = argv[0], int(argv[1]), int(argv[2])
    torch.set_num_threads(threads)
    print(json.dumps(run_bench_case(name, repeats), default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
