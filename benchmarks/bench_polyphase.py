"""Polyphase anchoring and APS versus a plain strided subsample, on a (32, 64, 32, 32) tensor.

Run: ``.venv/bin/python benchmarks/bench_polyphase.py``. One thread; every operation is
warmed up, then timed in many short interleaved rounds (torch.utils.benchmark) and the
fastest round is kept, so that load from other processes affects all rows alike. Ratios
are against the plain strided subsample ``x[..., ::s, ::s].contiguous()`` (materialised,
as a strided layer would) measured in the same process.
"""

from __future__ import annotations

import torch
import torch.utils.benchmark as benchmark

from groupattn.canonical import AdaptivePolyphaseDownsample, polyphase_anchor, polyphase_norms

ROUNDS = 40


def _best_median_ms(statements: dict[str, str], env: dict[str, object]) -> dict[str, float]:
    """Per statement: the minimum over interleaved rounds of the mean of 10 runs, in ms.

    The minimum is the least contention-sensitive estimate on a shared machine.
    """
    timers = {
        name: benchmark.Timer(stmt=stmt, globals=env, num_threads=1)
        for name, stmt in statements.items()
    }
    for timer in timers.values():
        timer.timeit(5)  # warm-up
    best = {name: float("inf") for name in statements}
    for _ in range(ROUNDS):
        for name, timer in timers.items():
            best[name] = min(best[name], timer.timeit(10).mean * 1e3)
    return best


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(32, 64, 32, 32)
    print(f"{'stride':>6} | {'operation':<50} | {'best ms':>9} | ratio vs subsample")
    print("-" * 90)
    for stride in (2, 4):
        env = {
            "torch": torch,
            "x": x,
            "s": stride,
            "anchor": polyphase_anchor,
            "norms": polyphase_norms,
            "down": AdaptivePolyphaseDownsample(stride),
        }
        statements = {
            "plain strided subsample x[..., ::s, ::s]": "x[..., ::s, ::s].contiguous()",
            "polyphase norms (all s^2 at once)": "norms(x, s)",
            "APS down-sampling (norms + gather)": "down(x)",
            "polyphase anchoring (full-resolution roll)": "anchor(x, s)",
            "for scale: torch.roll(x, (1, 1)) (same-size copy)": "torch.roll(x, (1, 1), (2, 3))",
        }
        times = _best_median_ms(statements, env)
        reference = times["plain strided subsample x[..., ::s, ::s]"]
        for name, ms in times.items():
            print(f"{stride:>6} | {name:<50} | {ms:9.3f} | {ms / reference:6.2f}x")


if __name__ == "__main__":
    main()
