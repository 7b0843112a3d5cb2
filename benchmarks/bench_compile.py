"""``torch.compile`` speed-up and the equivariance error of every registry model in each precision (#15).

Run: ``.venv/bin/python benchmarks/bench_compile.py [--threads 2] [--batch 8] [--rounds 20]
[--models vit gsa group_vit] [--inputs 8] [--moves 4]``.

(a) **Compile speed-up.** For each model of ``--models`` (seed 0, the registry preset) the
eager module and ``torch.compile(module)`` (inductor, default mode) run a forward pass
(eval mode, ``no_grad``) and a training step (train mode, forward, cross-entropy,
backward) on one ``(batch, C, H, W)`` batch. After two warm-up calls each, the eager and
compiled calls alternate for ``rounds`` rounds in one process; the table gives the median
of each and their ratio ``eager / compiled`` (above 1: compile is faster). The compile time
(the first compiled call, Dynamo tracing and code generation; warm-up excluded from the
medians) is reported apart.

(b) **Equivariance error.** For every registry model (equivariant preset, untrained, eval
mode, seed 0) and each precision of ``bench_precision.PRECISIONS`` except fp16 — float32,
bf16 autocast, bf16 weights and input — the relative change of the logits under the
model's group, ``max_g max|f(g·x) − f(x)| / max|f(x)|`` over ``inputs`` random images and
the elements of ``bench_precision.group_moves`` (circular shifts for the shift models,
the three quarter turns for C4, quarter turns composed with shifts for p4), measured with
[`relative_error`][groupattn.testing.relative_error] in float64.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from bench_precision import PRECISIONS, group_moves, relative_change
from torch import nn

from groupattn.models import create, get_spec, list_models

Step = Callable[[], object]


def _forward(model: nn.Module, x: torch.Tensor) -> Step:
    def step() -> object:
        with torch.no_grad():
            return model(x)

    return step


def _training_step(model: nn.Module, x: torch.Tensor) -> Step:
    labels = torch.arange(x.shape[0]) % 10

    def step() -> object:
        model.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        return loss

    return step


def _seconds(step: Step) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def speedup(eager: Step, compiled: Step, rounds: int) -> tuple[float, float, float]:
    """Compile time, and the median eager and compiled times of interleaved calls.

    Parameters
    ----------
    eager, compiled
        One call each (a forward pass or a training step).
    rounds
        Interleaved measurements of each, after two warm-up calls.

    Returns
    -------
    tuple of float
        ``(compile seconds, eager median, compiled median)``; compile seconds are the
        first compiled call's.
    """
    first = _seconds(compiled)
    for _ in range(2):
        eager(), compiled()
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for r in range(rounds):
        order = ("eager", "compiled") if r % 2 == 0 else ("compiled", "eager")
        for which in order:
            times[which].append(_seconds(eager if which == "eager" else compiled))
    return first, statistics.median(times["eager"]), statistics.median(times["compiled"])


def compile_table(models: list[str], batch: int, rounds: int) -> None:
    """Print part (a): one row per model and mode."""
    print(
        f"(a) torch.compile (inductor, default mode) against eager; batch {batch}, {rounds} rounds"
    )
    header = f"{'model':<9} | {'call':<13} | {'compile s':>9} | {'eager ms':>8} | {'compiled ms':>11} | speed-up"
    print(header)
    print("-" * len(header))
    for name in models:
        x = torch.randn(
            batch, *get_spec(name).input_shape, generator=torch.Generator().manual_seed(1)
        )
        for call in ("forward", "training step"):
            torch._dynamo.reset()
            torch.manual_seed(0)
            model = create(name).train(call == "training step")
            make = _forward if call == "forward" else _training_step
            compiled = torch.compile(model)
            first, eager_s, compiled_s = speedup(make(model, x), make(compiled, x), rounds)  # type: ignore[arg-type]
            print(
                f"{name:<9} | {call:<13} | {first:9.1f} | {1e3 * eager_s:8.2f} | {1e3 * compiled_s:11.2f} | "
                f"{eager_s / compiled_s:7.2f}x",
                flush=True,
            )


def equivariance_table(inputs: int, moves: int) -> None:
    """Print part (b): one row per registry model, one column per precision."""
    precisions = [p for p in PRECISIONS if p != "fp16 autocast"]
    print()
    print(
        f"(b) relative equivariance error of the logits, max over {inputs} random images and "
        f"{moves} group elements (C4: its 3 turns)"
    )
    header = f"{'model':<9} | {'group':<12} | " + " | ".join(f"{p:>18}" for p in precisions)
    print(header)
    print("-" * len(header))
    for name in list_models():
        spec = get_spec(name)
        c, h, w = spec.input_shape
        torch.manual_seed(0)
        model = create(name).eval()
        images = torch.randn(inputs, c, h, w, generator=torch.Generator().manual_seed(1))
        elements = group_moves(spec.group, moves, h, w)
        errors = [relative_change(model, images, elements, p) for p in precisions]
        print(
            f"{name:<9} | {spec.group:<12} | " + " | ".join(f"{e:18.2e}" for e in errors),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--models", nargs="*", default=["vit", "gsa", "group_vit"])
    parser.add_argument("--inputs", type=int, default=8)
    parser.add_argument("--moves", type=int, default=4)
    parser.add_argument("--skip-compile", action="store_true", help="only part (b)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, seed 0")
    if not args.skip_compile:
        compile_table(args.models, args.batch, args.rounds)
    equivariance_table(args.inputs, args.moves)


if __name__ == "__main__":
    main()
