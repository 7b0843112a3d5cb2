"""Polyphase anchoring and APS versus a plain strided subsample, on a (32, 64, 32, 32) tensor.

Run: ``.venv/bin/python benchmarks/bench_polyphase.py``. Prints a table of median times
(torch.utils.benchmark, one thread, warm-up included) and ratios against the plain strided
subsample ``x[..., ::s, ::s].contiguous()`` measured in the same process.
"""

from __future__ import annotations

import torch
import torch.utils.benchmark as benchmark

from groupattn.canonical import AdaptivePolyphaseDownsample, polyphase_anchor, polyphase_norms


def _median_ms(stmt: str, env: dict[str, object]) -> float:
    timer = benchmark.Timer(stmt=stmt, globals=env, num_threads=1)
    timer.timeit(5)  # warm-up
    return timer.blocked_autorange(min_run_time=1.0).median * 1e3


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(32, 64, 32, 32)
    print(f"{'stride':>6} | {'operation':<44} | {'median ms':>9} | ratio vs subsample")
    print("-" * 84)
    for stride in (2, 4):
        down = AdaptivePolyphaseDownsample(stride)
        env = {"x": x, "s": stride, "anchor": polyphase_anchor, "norms": polyphase_norms, "down": down}
        reference = _median_ms("x[..., ::s, ::s].contiguous()", env)
        rows = [
            ("plain strided subsample x[..., ::s, ::s]", reference),
            ("polyphase norms (all s^2 at once)", _median_ms("norms(x, s)", env)),
            ("APS down-sampling (norms + gather)", _median_ms("down(x)", env)),
            ("polyphase anchoring (full-resolution roll)", _median_ms("anchor(x, s)", env)),
        ]
        for name, ms in rows:
            print(f"{stride:>6} | {name:<44} | {ms:9.3f} | {ms / reference:6.2f}x")


if __name__ == "__main__":
    main()
