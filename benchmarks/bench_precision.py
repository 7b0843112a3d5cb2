"""Shift consistency of the shift-invariant models in every precision (issue #18).

Run: ``.venv/bin/python benchmarks/bench_precision.py [--inputs 128] [--shifts 8]``.

For each registry model (``vit``, ``swin``, ``twins``; untrained, seed 0, eval mode) and
each precision — float32, bf16 autocast, fp16 autocast, bf16 weights and input — it
feeds ``inputs`` random images and ``shifts`` random circular shifts of them and reports

* **consistency**: the share of images whose predicted class is the same for the image
  and all its shifts;
* **max change**: the largest ``|logits(shift(x)) − logits(x)|`` over all of them, in
  the output dtype (0.0 where the model is exact).

* **exact tokens**: the share of (image, shift) pairs whose patch-embedding output (the
  anchored token grid, after the models' only canonicalizer) is *bit for bit* a circular
  shift of the unshifted image's: 100% means every anchoring decision moved with the
  input, so what is left in the max change is arithmetic after it (attention and pooling
  reduce over the tokens in another order once they are rolled), not a decision;
* **near-ties**: images whose anchoring margin is within
  :data:`~groupattn.canonical.NEAR_TIE_ULPS` roundings of the input dtype (what
  :func:`~groupattn.canonical.record_canonicalizations` flags as tied).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import NamedTuple

import torch

from groupattn.canonical import record_canonicalizations
from groupattn.models import create, get_spec

MODELS = ("vit", "swin", "twins")


def _precisions() -> dict[str, tuple[torch.dtype | None, Callable[[], contextlib.AbstractContextManager[None]]]]:
    """name → (dtype to cast weights and input to, or None; context to run the forward in)."""

    def autocast(dtype: torch.dtype) -> Callable[[], contextlib.AbstractContextManager[None]]:
        return lambda: torch.autocast("cpu", dtype=dtype)  # type: ignore[return-value]

    return {
        "float32": (None, contextlib.nullcontext),
        "bf16 autocast": (None, autocast(torch.bfloat16)),
        "fp16 autocast": (None, autocast(torch.float16)),
        "bf16 weights+input": (torch.bfloat16, contextlib.nullcontext),
    }


class Result(NamedTuple):
    """One row of the table."""

    consistency: float  #: % of images predicted the same under every shift
    change: float  #: max |logits(shift(x)) - logits(x)|
    exact_tokens: float  #: % of (image, shift) pairs with a bit-exact shifted token grid
    near_ties: int  #: images flagged as (near-)tied by the recorder


def measure(
    name: str, precision: str, inputs: int = 128, shifts: int = 8, seed: int = 0, chunk: int = 32
) -> Result:
    """Shift consistency of one model in one precision.

    Parameters
    ----------
    name
        Registry name (``"vit"``, ``"swin"``, ``"twins"``: one anchored patch embedding).
    precision
        A key of the precision table (``"float32"``, ``"bf16 autocast"``, ...).
    inputs, shifts
        Number of random images ``(inputs, C, H, W)`` and of random circular shifts.
    seed
        Seed of the weights (``torch.manual_seed(seed)`` before ``create``); the images
        and shifts come from a generator seeded with ``seed + 1``.
    chunk
        Batch size of the forward passes.

    Returns
    -------
    Result
        The row.
    """
    dtype, context = _precisions()[precision]
    torch.manual_seed(seed)
    model = create(name).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    c, h, w = get_spec(name).input_shape
    x = torch.randn(inputs, c, h, w, generator=gen)
    offsets = torch.randint(0, max(h, w), (shifts, 2), generator=gen)
    if dtype is not None:
        model, x = model.to(dtype), x.to(dtype)
    embedded: list[torch.Tensor] = []
    model.patch_embed.register_forward_hook(lambda _m, _a, out: embedded.append(out.detach()))

    def run(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        outs = []
        embedded.clear()
        with torch.no_grad(), context():
            for start in range(0, images.shape[0], chunk):
                outs.append(model(images[start : start + chunk]))
        return torch.cat(outs), torch.cat(embedded)

    with record_canonicalizations() as recorder:
        base, tokens = run(x)
    near_ties = sum(event.num_tied for event in recorder.events)  # the patch embedding's decisions
    grid = model.patch_embed.grid
    consistent = torch.ones(inputs, dtype=torch.bool)
    change, exact = 0.0, 0
    for dy, dx in offsets.tolist():
        out, moved = run(torch.roll(x, (dy % h, dx % w), dims=(2, 3)))
        consistent &= out.argmax(dim=1) == base.argmax(dim=1)
        change = max(change, float((out.float() - base.float()).abs().max()))
        exact += int(_is_token_roll(tokens, moved, grid).sum())
    return Result(
        100.0 * float(consistent.float().mean()), change, 100.0 * exact / (inputs * shifts), near_ties
    )


def _is_token_roll(a: torch.Tensor, b: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """``(B,)`` bool: token grid ``b[i]`` ``(N, C)`` is bit for bit a circular roll of ``a[i]``."""
    gh, gw = grid
    a = a.reshape(a.shape[0], gh, gw, -1)
    b = b.reshape(b.shape[0], gh, gw, -1)
    found = torch.zeros(a.shape[0], dtype=torch.bool)
    for ty in range(gh):
        for tx in range(gw):
            found |= (torch.roll(a, (ty, tx), dims=(1, 2)) == b).flatten(1).all(dim=1)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--inputs", type=int, default=128)
    parser.add_argument("--shifts", type=int, default=8)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--precisions", nargs="*", default=list(_precisions()))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"untrained, seed 0, {args.inputs} random inputs, {args.shifts} random circular shifts, one thread")
    print(f"{'model':<6} | {'precision':<19} | {'consistency':>11} | {'max change':>10} | {'exact tokens':>12} | near-ties")
    print("-" * 84)
    for name in args.models:
        for precision in args.precisions:
            r = measure(name, precision, args.inputs, args.shifts)
            print(
                f"{name:<6} | {precision:<19} | {r.consistency:10.1f}% | {r.change:10.3g} | "
                f"{r.exact_tokens:11.1f}% | {r.near_ties}"
            )


if __name__ == "__main__":
    main()
