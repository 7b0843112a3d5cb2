"""Forward time of each shift-equivariant model against its baseline of the same size.

Run: ``.venv/bin/python benchmarks/bench_shift_models.py``. Both variants are timed in the
same process (one thread, eval mode, no grad, warm-up included), in 20 interleaved rounds
whose fastest is kept (least sensitive to load from other processes); the ratio is the equivariant model's time over the
baseline's (target <= 1.15x).
"""

from __future__ import annotations

import torch
import torch.utils.benchmark as benchmark

from groupattn.models import create


def _best_ms(model: torch.nn.Module, x: torch.Tensor) -> float:
    """The mean of 5 forward passes, in ms (call repeatedly and keep the minimum)."""
    timer = benchmark.Timer(
        stmt="with torch.no_grad(): model(x)",
        globals={"model": model, "x": x, "torch": torch},
        num_threads=1,
    )
    return timer.timeit(5).mean * 1e3


def main(batch: int = 32) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(batch, 1, 32, 32)
    print(f"batch {batch}, input 1x32x32, one thread")
    print(
        f"{'model':<6} | {'params eq/base':>15} | {'equivariant ms':>14} | {'baseline ms':>11} | ratio"
    )
    print("-" * 66)
    for name in ("vit", "swin", "twins"):
        equivariant, baseline = create(name).eval(), create(name, equivariant=False).eval()
        params = (sum(p.numel() for p in m.parameters()) for m in (equivariant, baseline))
        # interleave to share the same contention
        _best_ms(equivariant, x), _best_ms(baseline, x)  # warm-up
        times_eq, times_base = [], []
        for _ in range(20):
            times_eq.append(_best_ms(equivariant, x))
            times_base.append(_best_ms(baseline, x))
        eq_ms, base_ms = min(times_eq), min(times_base)
        print(
            f"{name:<6} | {'/'.join(str(p) for p in params):>15} | {eq_ms:14.2f} | {base_ms:11.2f} | {eq_ms / base_ms:.2f}x"
        )


if __name__ == "__main__":
    main()
