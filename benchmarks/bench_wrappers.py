"""Cost of making a backbone invariant: frame averaging and canonicalization against the bare backbone.

Run: ``.venv/bin/python benchmarks/bench_wrappers.py`` (about 2 minutes). A plain CNN
and the plain ViT of the registry (``create("vit", equivariant=False)``), batch 32 of
1×32×32 images, 2 threads; each wrapper and its bare backbone are timed in alternation
in the same process (``interleaved_best_times``: best of at least 3 rounds), for the
forward pass (eval, no grad) and for a training step (forward and backward). Ratios are
wrapper / bare backbone.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from torch import nn

from groupattn.bench._cases import _steps, interleaved_best_times
from groupattn.canonical import ArgmaxCanonicalizer
from groupattn.groups import CyclicGroup, DihedralGroup
from groupattn.models import create
from groupattn.nn import Canonicalized, FrameAveraging, LearnedCanonicalizer, norm_score


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def _scorer() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 5, stride=4), nn.Tanh(), nn.Flatten(), nn.Linear(196, 1))


WRAPPERS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "FrameAveraging C4": lambda b: FrameAveraging(b, CyclicGroup(4)),
    "FrameAveraging D4": lambda b: FrameAveraging(b, DihedralGroup(4)),
    "FrameAveraging D4 chunk=1": lambda b: FrameAveraging(b, DihedralGroup(4), chunk=1),
    "Canonicalized D4 (norm_score)": lambda b: Canonicalized(
        b, ArgmaxCanonicalizer(DihedralGroup(4), norm_score(1), output_group=CyclicGroup(1))
    ),
    "Canonicalized D4 (learned)": lambda b: Canonicalized(
        b, LearnedCanonicalizer(DihedralGroup(4), _scorer())
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per timed pair")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(args.batch, 1, 32, 32)
    print(f"batch {args.batch}, 1x32x32, {args.threads} threads; ratios = wrapper / bare backbone")
    print(f"{'backbone':<5} | {'wrapper':<30} | {'forward':>8} | {'train step':>10}")
    print("-" * 64)
    for name, build in (("cnn", _cnn), ("vit", lambda: create("vit", equivariant=False))):
        torch.manual_seed(0)
        backbone = build()
        bare_forward, bare_train = _steps(backbone, x)
        for label, wrap in WRAPPERS.items():
            wrapped_forward, wrapped_train = _steps(wrap(backbone), x)
            ratios = []
            for wrapped, bare in ((wrapped_forward, bare_forward), (wrapped_train, bare_train)):
                a, b = interleaved_best_times(wrapped, bare, repeats=3, budget_s=args.budget)
                ratios.append(a / b)
            print(f"{name:<5} | {label:<30} | {ratios[0]:>7.2f}x | {ratios[1]:>9.2f}x", flush=True)


if __name__ == "__main__":
    main()
