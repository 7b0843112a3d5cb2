"""Cost of making a backbone invariant: frame averaging and canonicalization against the bare backbone.

Run: ``.venv/bin/python benchmarks/bench_wrappers.py`` (about 2 minutes). A plain CNN
and the plain ViT of the registry (``create("vit", equivariant=False)``) on batch 32 of
1×32×32 images; with ``--backbones resnet18 timm_vit`` (where torchvision / timm are
installed) torchvision's ResNet-18 and timm's ViT-Tiny (``vit_tiny_patch16_224`` at
32×32 with 4×4 patches, 12 blocks) on batch 32 of 3×32×32 images. 2 threads; each wrapper
and its bare backbone are timed in alternation in the same process
(``interleaved_best_times``: best of at least 3 rounds), for the forward pass (eval, no
grad) and for a training step (forward and backward). Ratios are wrapper / bare backbone.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from groupattn._atomic import write_atomic
from groupattn.actions import GridField
from groupattn.bench._cases import _steps, interleaved_best_times
from groupattn.canonical import ArgmaxCanonicalizer
from groupattn.groups import CyclicGroup, DihedralGroup, FiniteGroup
from groupattn.models import create
from groupattn.nn import Canonicalized, FrameAveraging, LearnedCanonicalizer, norm_score


def _cnn(channels: int = 1) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1),
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


def _resnet18(channels: int) -> nn.Module:
    import torchvision  # type: ignore[import-not-found,import-untyped,unused-ignore]

    return torchvision.models.resnet18(num_classes=10)


def _timm_vit(channels: int) -> nn.Module:
    import timm  # type: ignore[import-not-found,import-untyped,unused-ignore]

    return timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        num_classes=10,
        img_size=32,
        patch_size=4,
        in_chans=channels,
    )


#: name: (builder taking the input channels, input channels)
BACKBONES: dict[str, tuple[Callable[[int], nn.Module], int]] = {
    "cnn": (_cnn, 1),
    "vit": (lambda channels: create("vit", equivariant=False), 1),
    "resnet18": (_resnet18, 3),
    "timm_vit": (_timm_vit, 3),
}


def _scorer(channels: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(channels, 4, 5, stride=4), nn.Tanh(), nn.Flatten(), nn.Linear(196, 1)
    )


WRAPPERS: dict[str, Callable[[nn.Module, int], nn.Module]] = {
    "FrameAveraging C4": lambda b, c: FrameAveraging(b, CyclicGroup(4)),
    "FrameAveraging D4": lambda b, c: FrameAveraging(b, DihedralGroup(4)),
    "FrameAveraging D4 batched": lambda b, c: FrameAveraging(b, DihedralGroup(4), chunk=None),
    "Canonicalized D4 (norm_score)": lambda b, c: Canonicalized(
        b, ArgmaxCanonicalizer(DihedralGroup(4), norm_score(c), output_group=CyclicGroup(1))
    ),
    "Canonicalized D4 (learned)": lambda b, c: Canonicalized(
        b, LearnedCanonicalizer(DihedralGroup(4), _scorer(c))
    ),
}


def invariance_error(model: nn.Module, x: torch.Tensor, group: FiniteGroup) -> float:
    """Largest ``‖f(g·x) − f(x)‖ / ‖f(x)‖`` over every element of ``group``, in float64."""
    model = copy.deepcopy(model).double().eval()
    x = x.double()
    field = GridField()
    with torch.no_grad():
        y = model(x)
        return max(
            float((model(field.act(group, g, x)) - y).norm() / y.norm()) for g in group.elements()
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per timed pair")
    parser.add_argument("--backbones", nargs="+", choices=sorted(BACKBONES), default=["cnn", "vit"])
    parser.add_argument("--json", type=Path, help="write the rows to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"batch {args.batch}, 32x32, {args.threads} threads; ratios = wrapper / bare backbone; "
        "invariance = largest relative change of the logits over every element of the "
        "wrapper's group (the bare backbone: D4), float64"
    )
    print(f"{'backbone':<8} | {'wrapper':<30} | {'forward':>8} | {'train step':>10} | invariance")
    print("-" * 82)
    rows = []
    for name in args.backbones:
        build, channels = BACKBONES[name]
        torch.manual_seed(0)
        x = torch.randn(args.batch, channels, 32, 32)
        backbone = build(channels)
        bare_forward, bare_train = _steps(backbone, x)
        bare_error = invariance_error(backbone, x[:4], DihedralGroup(4))
        print(f"{name:<8} | {'(bare)':<30} | {1:>7.2f}x | {1:>9.2f}x | {bare_error:.1e}")
        for label, wrap in WRAPPERS.items():
            torch.manual_seed(1)
            wrapped = wrap(backbone, channels)
            wrapped_forward, wrapped_train = _steps(wrapped, x)
            ratios = []
            for a_step, b_step in ((wrapped_forward, bare_forward), (wrapped_train, bare_train)):
                a, b = interleaved_best_times(a_step, b_step, repeats=3, budget_s=args.budget)
                ratios.append(a / b)
            group = CyclicGroup(4) if " C4" in label else DihedralGroup(4)
            error = invariance_error(wrapped, x[:4], group)
            print(
                f"{name:<8} | {label:<30} | {ratios[0]:>7.2f}x | {ratios[1]:>9.2f}x | {error:.1e}",
                flush=True,
            )
            rows.append(
                {
                    "backbone": name,
                    "wrapper": label,
                    "forward_ratio": ratios[0],
                    "train_step_ratio": ratios[1],
                    "invariance_error": error,
                    "bare_invariance_error": bare_error,
                }
            )
    if args.json:
        config = {"batch": args.batch, "threads": args.threads, "torch": torch.__version__}
        write_atomic(args.json, json.dumps({"config": config, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
