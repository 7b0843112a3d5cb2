"""Consistency of every registry model under its group in every precision, untrained and trained (#18).

Run: ``.venv/bin/python benchmarks/bench_precision.py [--inputs 128] [--moves 8] [--epochs E]
[--limit N] [--models ...] [--weights untrained trained]``.

For each registry model ([`list_models`][groupattn.models.list_models]; seed 0, eval mode), with
its weights **untrained** (as created) and **trained** (the library's own
[`train`][groupattn.training.train] on all 1,348 bundled training digits, batch 32, the
registry's learning rate, one thread, for ``EPOCHS`` epochs — 10, or 6 for the C4
group ViT and 4 for the p4 GSA-Net, which cost far more per image — about 5 minutes for
all five), and for each
precision — float32, bf16 autocast, fp16 autocast, bf16 weights and input — it feeds
``inputs`` images (untrained: random ``N(0, 1)`` images; trained: the first test digits)
and ``moves`` elements of the model's group (``translations``: random circular shifts;
``c4``: the three non-trivial quarter turns; ``p4``: random quarter turns composed with
random circular shifts) and reports

* **consistency**: the share of images whose predicted class is the same for the image
  and all its moved copies;
* **max change**: the largest ``|logits(g·x) − logits(x)|`` over all of them, in the
  output dtype (0 where the model is bit-exact), and in units in the last place (ulps), in
  the output dtype, of the image's largest logit: 1 means one rounding step of the
  logits' scale;
* **exact tokens** (models with an anchored patch embedding): the share of (image,
  element) pairs whose anchored token grid is *bit for bit* a circular shift of the
  image's: 100 % means every anchoring decision moved with the input, so what is left in
  the max change is arithmetic after it, not a decision;
* **ties**: images whose canonicalizer margin is 0 or within the float64 rounding of the
  scores (on the image or a moved copy; the documented limit of anchoring);
* **near-ties**: images whose margin is within
  [`NEAR_TIE_ULPS`][groupattn.canonical.NEAR_TIE_ULPS] roundings of the precision in
  use — the *a-priori* flag, a risk only if the canonicalizer's input carried rounding
  that does not move with the group;
* **at risk**: the near-ties whose canonicalizer received values that did *not* move
  exactly ([`near_ties_between`][groupattn.canonical.near_ties_between] on the image and each moved copy):
  what [`verify`][groupattn.check.verify] reports.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from groupattn.canonical import CanonicalizationEvent, near_ties_between, record_canonicalizations
from groupattn.models import create, get_spec, list_models
from groupattn.training import TrainConfig, accuracy, load_training_data, train

Context = Callable[[], contextlib.AbstractContextManager[object]]

#: Training epochs per registry model (default 10): enough for 82–92 % test accuracy.
EPOCHS: dict[str, int] = {"group_vit": 6, "gsa": 4}
Move = Callable[[torch.Tensor], torch.Tensor]


def _autocast(dtype: torch.dtype) -> Context:
    return lambda: torch.autocast("cpu", dtype=dtype)


#: name → (dtype of weights and input, or ``None`` for float32; context of the forward pass)
PRECISIONS: dict[str, tuple[torch.dtype | None, Context]] = {
    "float32": (None, contextlib.nullcontext),
    "bf16 autocast": (None, _autocast(torch.bfloat16)),
    "fp16 autocast": (None, _autocast(torch.float16)),
    "bf16 weights+input": (torch.bfloat16, contextlib.nullcontext),
}


class Result(NamedTuple):
    """One row of the table."""

    consistency: float  #: % of images predicted the same under every move
    change: float  #: max |logits(g·x) - logits(x)|
    ulps: float  #: max |logits(g·x) - logits(x)| / ulp(max |logits(x)|) per image, in the output dtype
    exact_tokens: float | None  #: % of (image, move) pairs with a bit-exact shifted token grid
    ties: int  #: images with a canonicalizer tie (float64 rounding of the scores)
    near_ties: int  #: images with an a-priori near-tie (rounding of the precision in use)
    at_risk: int  #: near-ties on values that did not move exactly


def group_moves(
    group: str, count: int, height: int, width: int, seed: int = 1
) -> list[tuple[str, Move]]:
    """Seeded elements of a registry group acting on images ``(B, C, H, W)``, as exact permutations.

    Parameters
    ----------
    group
        The registry's group name (``"translations"``, ``"c4"``, ``"p4"``).
    count
        Number of random elements (translations, p4); C4 always gives its 3 non-trivial turns.
    height, width
        Image size.
    seed
        Seed of the draws.

    Returns
    -------
    list of (str, callable)
        A label and the action ``(B, C, H, W) → (B, C, H, W)`` of each element.

    Raises
    ------
    ValueError
        For a group this benchmark does not move images by.
    """
    gen = torch.Generator().manual_seed(seed)

    def shift(dy: int, dx: int, k: int = 0) -> Move:
        return lambda x: torch.roll(torch.rot90(x, k, dims=(2, 3)), (dy, dx), dims=(2, 3))

    if group == "translations":
        offsets = torch.randint(0, max(height, width), (count, 2), generator=gen).tolist()
        return [
            (f"shift {dy % height},{dx % width}", shift(dy % height, dx % width))
            for dy, dx in offsets
        ]
    if group == "c4":
        return [(f"rot {90 * k}", shift(0, 0, k)) for k in (1, 2, 3)]
    if group == "p4":
        draws = torch.randint(0, max(height, width), (count, 3), generator=gen).tolist()
        return [
            (
                f"rot {90 * (k % 4)} shift {dy % height},{dx % width}",
                shift(dy % height, dx % width, k % 4),
            )
            for k, dy, dx in draws
        ]
    raise ValueError(f"bench_precision: expected group 'translations', 'c4' or 'p4', got {group!r}")


def trained_model(
    name: str, epochs: int, limit: int | None, seed: int = 0
) -> tuple[nn.Module, torch.Tensor, float]:
    """``name`` trained on the bundled digits with the library's trainer.

    Parameters
    ----------
    name
        Registry name.
    epochs, limit
        Epochs, and training digits kept (``None``: all 1,348).
    seed
        Seed of the weights (``torch.manual_seed`` before ``create``) and of the run.

    Returns
    -------
    tuple
        The model in eval mode; the test digits ``(N, C, H, W)`` on the model's canvas;
        the float32 test accuracy.
    """
    spec = get_spec(name)
    data = load_training_data("digits", limit=limit, seed=seed, canvas=spec.input_shape[-1])
    torch.manual_seed(seed)
    config = TrainConfig(
        epochs=epochs, batch_size=32, seed=seed, progress=False, **spec.training_settings()
    )
    model = train(create(name), data, config).model.eval()
    return model, data.test_images, accuracy(model, data.test_images, data.test_labels)


def measure(
    model: nn.Module,
    images: torch.Tensor,
    moves: list[tuple[str, Move]],
    precision: str,
    chunk: int = 32,
) -> Result:
    """Consistency of one model under ``moves`` in one precision.

    Parameters
    ----------
    model
        A classifier ``(B, C, H, W) → (B, classes)`` in eval mode (float32; a copy is
        cast for the bf16-weights precision).
    images
        ``(N, C, H, W)`` float32.
    moves
        Group elements acting on images (see ``group_moves``).
    precision
        A key of ``PRECISIONS``.
    chunk
        Batch size of the forward passes.

    Returns
    -------
    Result
        The row.
    """
    dtype, context = PRECISIONS[precision]
    x = images
    if dtype is not None:
        model = _cast(model, dtype)
        x = images.to(dtype)
    n = x.shape[0]
    embed = getattr(model, "patch_embed", None)
    anchored = embed is not None and bool(getattr(embed, "anchored", False))
    embedded: list[torch.Tensor] = []
    handle = None
    if embed is not None and anchored:
        handle = embed.register_forward_hook(lambda _m, _a, out: embedded.append(out.detach()))

    def run(
        batch: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None, list[list[CanonicalizationEvent]]]:
        outs, events = [], []
        embedded.clear()
        with torch.no_grad(), context():
            for start in range(0, n, chunk):
                with record_canonicalizations() as recorder:
                    outs.append(model(batch[start : start + chunk]))
                events.append(list(recorder.events))
        return torch.cat(outs), (torch.cat(embedded) if anchored else None), events

    try:
        base, tokens, base_events = run(x)
        ties = _images(base_events, chunk, n, lambda e: e.tied)
        near = _images(
            base_events,
            chunk,
            n,
            lambda e: e.near_tied if e.near_tied is not None else torch.zeros_like(e.tied),
        )
        risk = torch.zeros(n, dtype=torch.bool)
        consistent = torch.ones(n, dtype=torch.bool)
        change, ulps, exact = 0.0, 0.0, 0
        for _label, move in moves:
            out, moved_tokens, events = run(move(x))
            consistent &= out.argmax(dim=1) == base.argmax(dim=1)
            diff = (out.double() - base.double()).abs()
            change = max(change, float(diff.max()))
            ulps = max(ulps, float((diff / _ulp(base.abs().amax(dim=1, keepdim=True))).max()))
            ties |= _images(events, chunk, n, lambda e: e.tied)
            risk |= _at_risk(base_events, events, chunk, n)
            if tokens is not None and moved_tokens is not None:
                exact += int(_is_token_roll(tokens, moved_tokens, embed.grid).sum())  # type: ignore[union-attr]
    finally:
        if handle is not None:
            handle.remove()
    return Result(
        100.0 * float(consistent.float().mean()),
        change,
        ulps,
        100.0 * exact / (n * len(moves)) if anchored and moves else None,
        int(ties.sum()),
        int(near.sum()),
        int(risk.sum()),
    )


def relative_change(
    model: nn.Module,
    images: torch.Tensor,
    moves: list[tuple[str, Move]],
    precision: str,
    chunk: int = 32,
) -> float:
    """The relative equivariance error of an invariant classifier in one precision.

    ``max_g max|f(g·x) − f(x)| / max|f(x)|`` over the images and ``moves``, in float64
    ([`relative_error`][groupattn.testing.relative_error]); 0 where the model is bit-exact.

    Parameters
    ----------
    model
        A classifier ``(B, C, H, W) → (B, classes)`` in eval mode (float32; a copy is cast
        for the bf16-weights precision).
    images
        ``(N, C, H, W)`` float32.
    moves
        Group elements acting on images (see ``group_moves``).
    precision
        A key of ``PRECISIONS``.
    chunk
        Batch size of the forward passes.

    Returns
    -------
    float
        The largest relative change over all moves.
    """
    from groupattn.testing import relative_error

    dtype, context = PRECISIONS[precision]
    x = images
    if dtype is not None:
        model = _cast(model, dtype)
        x = images.to(dtype)

    def run(batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), context():
            return torch.cat([model(batch[s : s + chunk]) for s in range(0, batch.shape[0], chunk)])

    base = run(x)
    return max((relative_error(run(move(x)), base) for _label, move in moves), default=0.0)


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """Unit in the last place of every entry of ``x`` in its own dtype, as float64 (normal numbers)."""
    info = torch.finfo(x.dtype)
    magnitude = x.double().abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(magnitude))) * info.eps


def _cast(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    import copy

    return copy.deepcopy(model).to(dtype)


def _rows_to_images(rows: torch.Tensor, start: int, size: int, n: int) -> torch.Tensor:
    """``(n,)`` bool: the images of a chunk ``[start, start + size)`` with a flagged row (batch-major rows)."""
    out = torch.zeros(n, dtype=torch.bool)
    if rows.numel() == 0 or not bool(rows.any()):
        return out
    per = rows.numel() // size if rows.numel() % size == 0 else 0
    if per == 0:  # rows that do not split by image: flag the whole chunk
        out[start : start + size] = True
        return out
    out[start : start + size] = rows.reshape(size, per).any(dim=1)
    return out


def _images(
    chunks: list[list[CanonicalizationEvent]],
    chunk: int,
    n: int,
    mask: Callable[[CanonicalizationEvent], torch.Tensor],
) -> torch.Tensor:
    out = torch.zeros(n, dtype=torch.bool)
    for c, events in enumerate(chunks):
        start = c * chunk
        size = min(chunk, n - start)
        for e in events:
            out |= _rows_to_images(mask(e), start, size, n)
    return out


def _at_risk(
    reference: list[list[CanonicalizationEvent]],
    moved: list[list[CanonicalizationEvent]],
    chunk: int,
    n: int,
) -> torch.Tensor:
    out = torch.zeros(n, dtype=torch.bool)
    for c, (ref_events, events) in enumerate(zip(reference, moved)):
        start = c * chunk
        size = min(chunk, n - start)
        if len(ref_events) != len(events):  # other calls: judge a priori
            for e in events:
                out |= _rows_to_images(
                    e.near_tied if e.near_tied is not None else e.tied, start, size, n
                )
            continue
        for ref, ev in zip(ref_events, events):
            samples = size if ev.batch != size and ev.batch % size == 0 else None
            out |= _rows_to_images(near_ties_between(ref, ev, samples), start, size, n)
    return out


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
    parser.add_argument(
        "--moves", type=int, default=8, help="random elements of the group (C4: its 3 turns)"
    )
    parser.add_argument(
        "--epochs", type=int, default=None, help="training epochs of every model (default: EPOCHS)"
    )
    parser.add_argument("--limit", type=int, default=0, help="training digits (0: all 1,348)")
    parser.add_argument("--models", nargs="*", default=list_models())
    parser.add_argument(
        "--weights", nargs="*", default=["untrained", "trained"], choices=["untrained", "trained"]
    )
    parser.add_argument(
        "--precisions", nargs="*", default=list(PRECISIONS), choices=list(PRECISIONS)
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    limit = args.limit or None
    print(
        f"seed 0, one thread; untrained: {args.inputs} random images; trained on {limit or 'all'} digits: "
        f"the first {args.inputs} test digits; {args.moves} random group elements (C4: its 3 turns)"
    )
    header = (
        f"{'model':<9} | {'weights':<20} | {'precision':<18} | {'consistency':>11} | {'max change':>10} | ulps | "
        f"{'exact tokens':>12} | ties | near-ties | at risk"
    )
    print(header)
    print("-" * len(header))
    for name in args.models:
        spec = get_spec(name)
        c, h, w = spec.input_shape
        moves = group_moves(spec.group, args.moves, h, w)
        for weights in args.weights:
            if weights == "untrained":
                torch.manual_seed(0)
                model = create(name).eval()
                images = torch.randn(
                    args.inputs, c, h, w, generator=torch.Generator().manual_seed(1)
                )
                label = "untrained"
            else:
                t0 = time.perf_counter()
                epochs = args.epochs if args.epochs is not None else EPOCHS.get(name, 10)
                model, test, acc = trained_model(name, epochs, limit)
                images = test[: args.inputs]
                label = f"{epochs} ep, {100 * acc:.0f} %, {time.perf_counter() - t0:.0f} s"
            for precision in args.precisions:
                r = measure(model, images, moves, precision)
                tokens = "—" if r.exact_tokens is None else f"{r.exact_tokens:11.1f}%"
                print(
                    f"{name:<9} | {label:<20} | {precision:<18} | {r.consistency:10.1f}% | {r.change:10.2g} | {r.ulps:4.3g} | "
                    f"{tokens:>12} | {r.ties:>4} | {r.near_ties:>9} | {r.at_risk:>7}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
