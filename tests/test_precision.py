"""Exact in every precision: canonicalizer decisions do not depend on the compute dtype (#18).

Every canonicalizer scores its candidates in float64 with autocast disabled, from the
values it receives, and applies its decision to the tensor as received. So under
float64, float32, bf16 / fp16 autocast and bf16 weights and input the decisions move
with the input exactly, the canonicalized tensors are bit-for-bit permutations of each
other, and inputs whose scores differ by less than one bf16 step are decided as in
float64 — not by the lowest index, which does not move with the input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from groupattn.actions import GridField
from groupattn.canonical import (
    NEAR_TIE_ULPS,
    AdaptivePolyphaseDownsample,
    AdaptivePolyphaseUpsample,
    ArgmaxCanonicalizer,
    PolyphaseAnchor,
    near_ties_between,
    polyphase_anchor,
    polyphase_norms,
    polyphase_phase,
    precision_in_use,
    record_canonicalizations,
    score_dtype,
)
from groupattn.groups import CyclicGroup, DihedralGroup
from groupattn.models import GSANet, create
from groupattn.nn import LiftedPolyphaseDownsample, PatchEmbedding


def _fp16_autocast_works() -> bool:
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            return (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
    except (RuntimeError, TypeError):  # older torch: CPU autocast is bf16 only
        return False


_FP16 = pytest.mark.skipif(
    not _fp16_autocast_works(), reason="this torch has no fp16 autocast on the CPU"
)

#: name → (dtype of weights and input, context of the forward pass)
PRECISIONS: dict[
    str, tuple[torch.dtype, Callable[[], contextlib.AbstractContextManager[object]]]
] = {
    "float64": (torch.float64, contextlib.nullcontext),
    "float32": (torch.float32, contextlib.nullcontext),
    "bf16-autocast": (torch.float32, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
    "fp16-autocast": (torch.float32, lambda: torch.autocast("cpu", dtype=torch.float16)),
    "bf16": (torch.bfloat16, contextlib.nullcontext),
}
PRECISION_PARAMS = [
    pytest.param(name, marks=_FP16 if name == "fp16-autocast" else ()) for name in PRECISIONS
]
#: the dtype the arithmetic effectively rounds to in each precision (for tolerances)
COMPUTE = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bf16-autocast": torch.bfloat16,
    "fp16-autocast": torch.float16,
    "bf16": torch.bfloat16,
}
_DRAWN = [n for n in PRECISIONS if n != "fp16-autocast" or _fp16_autocast_works()]
#: the design's relative equivariance tolerances where the arithmetic is not a permutation
DESIGN_TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


def _rounding_allowance(precision: str) -> float:
    """Relative change allowed by rounding of reductions taken in another order: four
    roundings of the compute dtype, and at least the design's tolerance for float32 /
    float64 (the kernels' summation order differs between CPUs: one AVX2 machine gives
    1.5e-6 for the GSA below, within the design's 1e-5)."""
    dtype = COMPUTE[precision]
    return max(4 * torch.finfo(dtype).eps, DESIGN_TOLERANCE.get(dtype, 0.0))


def _bf16_exact(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to bf16: values float64, float32 and bf16 all hold exactly."""
    return x.bfloat16().float()


def _run(precision: str, fn: Callable[[torch.Tensor], object], x: torch.Tensor) -> object:
    dtype, context = PRECISIONS[precision]
    with torch.no_grad(), context():
        return fn(x.to(dtype))


def _check_anchor_moves(
    out0, out1, t: tuple[int, int], s: int, grid: tuple[int, int] | None = None
) -> None:
    """``anchor(roll(x, t))`` is bit for bit ``roll(anchor(x), t + f0 − f1)``, a multiple of ``s``."""
    f0, f1 = out0.frame, out1.frame
    offset = torch.tensor(t)[None, :] + f0 - f1
    if bool((offset % s != 0).any()):
        raise AssertionError(
            f"frames {f0.tolist()} → {f1.tolist()} do not move with the shift {t} (stride {s})"
        )
    for b in range(out0.output.shape[0]):
        dy, dx = (int(v) for v in offset[b])
        if grid is None:
            expected = torch.roll(out0.output[b], (dy, dx), dims=(-2, -1))
        else:
            tokens = out0.output[b].reshape(grid[0], grid[1], -1)
            expected = torch.roll(tokens, (dy, dx), dims=(0, 1)).reshape(out0.output[b].shape)
        if not torch.equal(out1.output[b], expected):
            raise AssertionError(
                f"sample {b}: the anchored output is not a bit-exact shift by {(dy, dx)}"
            )


# --------------------------------------------------------------- canonicalizers, drawn inputs
@given(
    seed=st.integers(0, 2**16),
    stride=st.sampled_from([2, 4]),
    norm=st.sampled_from(["l2", "l1", "l4", "max"]),
    shift=st.tuples(st.integers(0, 7), st.integers(0, 7)),
    precision=st.sampled_from(_DRAWN),
    tokens=st.booleans(),
)
def test_polyphase_anchoring_is_exact_and_decided_in_float64(
    seed, stride, norm, shift, precision, tokens
) -> None:
    gen = torch.Generator().manual_seed(seed)
    x = _bf16_exact(torch.randn(3, 4, 8, 8, generator=gen))  # the same values in every precision
    grid = (8, 8) if tokens else None
    layout = (lambda im: im.flatten(2).transpose(1, 2)) if tokens else (lambda im: im)
    anchor = PolyphaseAnchor(stride, norm, grid=grid)  # type: ignore[arg-type]
    out0 = _run(precision, anchor, layout(x))
    out1 = _run(precision, anchor, layout(torch.roll(x, shift, dims=(2, 3))))
    _check_anchor_moves(out0, out1, shift, stride, grid)
    if out0.output.dtype != PRECISIONS[precision][0]:
        raise AssertionError(f"the data path changed dtype: {out0.output.dtype}")
    reference = polyphase_phase(layout(x).double(), stride, norm, grid)  # type: ignore[arg-type]
    if not (torch.equal(out0.frame, reference[0]) and torch.equal(out0.margin, reference[1])):
        raise AssertionError(
            f"{precision}: decided {out0.frame.tolist()}, float64 decides {reference[0].tolist()}"
        )
    if out0.margin.dtype != score_dtype("cpu"):
        raise AssertionError(f"margin in {out0.margin.dtype}")


@given(
    seed=st.integers(0, 2**16),
    stride=st.sampled_from([2, 4]),
    shift=st.tuples(st.integers(0, 7), st.integers(0, 7)),
    precision=st.sampled_from(_DRAWN),
)
def test_aps_down_and_up_are_exact_in_every_precision(seed, stride, shift, precision) -> None:
    gen = torch.Generator().manual_seed(seed)
    x = _bf16_exact(torch.randn(2, 3, 8, 8, generator=gen))
    down, up = AdaptivePolyphaseDownsample(stride), AdaptivePolyphaseUpsample(stride)

    def round_trip(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = down(z)
        return d.frame, up(d.output, d.frame)

    f0, y0 = _run(precision, round_trip, x)  # type: ignore[misc]
    f1, y1 = _run(precision, round_trip, torch.roll(x, shift, dims=(2, 3)))  # type: ignore[misc]
    if not torch.equal(y1, torch.roll(y0, shift, dims=(2, 3))):
        raise AssertionError(
            f"{precision}: up(down(x)) does not move exactly with the shift {shift}"
        )
    if bool(((f1 - f0 - torch.tensor(shift)) % stride != 0).any()):
        raise AssertionError(
            f"{precision}: APS frames {f0.tolist()} → {f1.tolist()} do not move with {shift}"
        )
    if not torch.equal(f0, polyphase_phase(x.double(), stride)[0]):
        raise AssertionError(f"{precision}: APS decided otherwise than in float64")


@pytest.mark.parametrize("precision", PRECISION_PARAMS)
def test_lifted_downsample_is_exact_under_shifts(precision: str) -> None:
    x = _bf16_exact(torch.randn(2, 3, 4, 8, 8))  # (B, C, |C4|, H, W)
    layer = LiftedPolyphaseDownsample("C4", 2)
    out0 = _run(precision, layer, x)
    for t in [(1, 0), (3, 5)]:
        moved = _run(precision, layer, torch.roll(x, t, dims=(3, 4)))
        for i in range(x.shape[0]):  # each sample by its own coarse shift (frame)
            rolls = [torch.roll(out0[i], (a, b), dims=(2, 3)) for a in range(4) for b in range(4)]
            if not any(torch.equal(moved[i], r) for r in rolls):
                raise AssertionError(
                    f"{precision}: shift {t} does not move sample {i} by a coarse shift"
                )


@pytest.mark.parametrize("group", [CyclicGroup(4), DihedralGroup(4)], ids=["C4", "D4"])
@pytest.mark.parametrize("precision", PRECISION_PARAMS)
def test_orientation_canonicalizer_is_invariant_in_every_precision(group, precision: str) -> None:
    weights = torch.randn(36, 1)

    def score(x: torch.Tensor) -> torch.Tensor:  # a matmul: autocast would run it in bf16 / fp16
        return (x.flatten(1) @ weights.to(x.dtype)).squeeze(1)

    canon = ArgmaxCanonicalizer(group, score)
    x = _bf16_exact(torch.randn(3, 1, 6, 6))
    reference = _run(precision, canon, x)
    if reference.output.dtype != PRECISIONS[precision][0]:
        raise AssertionError(f"the data path changed dtype: {reference.output.dtype}")
    for g in group.elements():
        moved = _run(precision, canon, GridField().act(group, g, x))
        if not torch.equal(moved.output, reference.output):
            raise AssertionError(f"{precision}: the canonical orientation changed under {g}")


# ------------------------------------------------------------------ near-ties of low precision
def _bumped(stride: int, phase: tuple[int, int], cells: int, channels: int = 1) -> torch.Tensor:
    """Ones, with one pixel of ``phase`` raised by one bf16 step: every phase's norm is equal in
    bf16 arithmetic (the bump is below its rounding of the sum), the bumped one wins in float64."""
    side = stride * cells
    x = torch.ones(1, channels, side, side)
    x[0, 0, phase[0] + stride * (cells - 1), phase[1]] = 1.0 + 2.0**-7
    return x


@pytest.mark.parametrize("precision", [p for p in PRECISION_PARAMS if "autocast" in p.values[0]])
def test_orientation_near_tie_under_autocast_is_decided_as_in_float64(precision: str) -> None:
    # the score reads the top-right corner through a matmul; the four corners differ by
    # 1e-4 relative, below one bf16 / fp16 step, so autocast would tie all four rotations
    group = CyclicGroup(4)
    pick = torch.zeros(36, 1)
    pick[5] = 1.0  # x[0, 0, -1] of a 6 × 6 image
    canon = ArgmaxCanonicalizer(group, lambda z: (z.flatten(1) @ pick.to(z.dtype)).squeeze(1))
    x = torch.ones(1, 1, 6, 6)
    x[0, 0, 0, 0], x[0, 0, 0, -1], x[0, 0, -1, -1], x[0, 0, -1, 0] = 1.0002, 1.0001, 1.0, 1.0003
    reference = _run(precision, canon, x)
    if float(reference.margin[0]) < 5e-5:
        raise AssertionError(
            f"{precision}: margin {float(reference.margin[0])}, expected the float64 one (1e-4)"
        )
    for g in group.elements():
        moved = _run(precision, canon, GridField().act(group, g, x))
        if not torch.equal(moved.output, reference.output):
            raise AssertionError(f"{precision}: the canonical orientation changed under {g}")


@given(
    stride=st.sampled_from([2, 4]),
    phase=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    cells=st.integers(2, 4),
    norm=st.sampled_from(["l2", "l1", "l4"]),
    shift=st.tuples(st.integers(0, 15), st.integers(0, 15)),
    precision=st.sampled_from(_DRAWN),
)
def test_bf16_near_tie_is_decided_as_in_float64(
    stride, phase, cells, norm, shift, precision
) -> None:
    phase = (phase[0] % stride, phase[1] % stride)
    x = torch.roll(_bumped(stride, phase, cells), shift, dims=(2, 3))
    expected = ((phase[0] + shift[0]) % stride, (phase[1] + shift[1]) % stride)
    out = _run(precision, lambda z: polyphase_anchor(z, stride, norm), x)  # type: ignore[arg-type]
    if out.frame[0].tolist() != list(expected):
        raise AssertionError(
            f"{precision}: picked phase {out.frame[0].tolist()}, float64 picks {expected}"
        )
    if not float(out.margin[0]) > 0.0:
        raise AssertionError(f"{precision}: the float64 margin is lost ({float(out.margin[0])})")
    if precision == "bf16":  # rounded to bf16, these norms would tie: check the test is meaningful
        norms16 = polyphase_norms(x.double(), stride, norm).bfloat16()  # type: ignore[arg-type]
        if not bool((norms16 == norms16.max()).all()):
            raise AssertionError("the input is not a bf16 tie")


@pytest.mark.parametrize("precision", PRECISION_PARAMS)
def test_relative_1e4_difference_under_autocast(precision: str) -> None:
    # two phases whose norms differ by 1e-4 relative: one bf16 step is 7.8e-3
    x = torch.ones(2, 8, 8, 8)
    x[:, :, 1::2, 1::2] *= 1.0 + 1e-4  # phase 3 wins in float64
    x[1] = torch.roll(x[1], (1, 1), dims=(1, 2))  # sample 1: phase 0 wins
    frame, margin = _run(precision, lambda z: polyphase_phase(z, 2), x)  # type: ignore[misc]
    wanted = (
        [[1, 1], [0, 0]] if precision != "bf16" else [[0, 0], [0, 0]]
    )  # bf16 input: 1 + 1e-4 is 1
    if frame.tolist() != wanted:
        raise AssertionError(f"{precision}: frames {frame.tolist()}, expected {wanted}")
    if bool((margin > 0).all()) != (
        precision != "bf16"
    ):  # bf16: an exact tie, the documented limit
        raise AssertionError(f"{precision}: margins {margin.tolist()}")


def test_near_ties_are_judged_against_the_precision_in_use() -> None:
    x = _bumped(
        2, (1, 0), cells=4
    )  # margin ≈ 5e-4 relative: within bf16 rounding, far outside float32's
    flagged = {}
    cases = [
        (torch.float64, None),
        (torch.float32, None),
        (torch.bfloat16, None),
        (torch.float32, torch.bfloat16),
    ]
    for dtype, autocast in cases:
        context = torch.autocast("cpu", dtype=autocast) if autocast else contextlib.nullcontext()
        with record_canonicalizations() as rec, context:
            out = polyphase_anchor(x.to(dtype), 2)
        (event,) = rec.events
        if event.input_dtype != dtype or event.margin_ulps is None or event.near_tied is None:
            raise AssertionError(f"the event does not report the input dtype: {event.input_dtype}")
        if event.precision != (
            autocast or dtype
        ):  # under autocast, upstream layers round to its dtype
            raise AssertionError(
                f"{dtype} under {autocast} autocast: judged against {event.precision}"
            )
        if event.num_tied or event.scores is None or event.scores.shape != (1, 4):
            raise AssertionError(
                f"{dtype}: a near-tie is not a tie ({event.num_tied}) and the scores are kept"
            )
        flagged[(dtype, autocast)] = bool(event.near_tied[0])
        if out.frame[0].tolist() != [1, 0]:
            raise AssertionError(f"{dtype}: picked {out.frame[0].tolist()}")
    expected = dict(zip(cases, [False, False, True, True]))
    if flagged != expected:
        raise AssertionError(f"near-ties flagged per precision: {flagged}")
    with record_canonicalizations() as rec:  # an exact tie stays a tie in every dtype (the limit)
        out = polyphase_anchor(torch.ones(1, 1, 4, 4), 2)
    if not (
        bool(rec.events[0].tied[0])
        and float(out.margin[0]) == 0.0
        and out.frame[0].tolist() == [0, 0]
    ):
        raise AssertionError("an exact tie is not reported as one")
    if rec.events[0].num_near_tied:
        raise AssertionError("an exact tie is counted as a near-tie too")
    if NEAR_TIE_ULPS < 1:
        raise AssertionError("near-ties must cover at least one rounding of the input")


def test_precision_in_use_covers_autocast_and_tf32() -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        judged = [precision_in_use(d, "cpu") for d in (torch.float32, torch.float16, torch.float64)]
    if judged != [torch.bfloat16, torch.bfloat16, torch.float64]:  # autocast leaves float64 alone
        raise AssertionError(f"under bf16 autocast: {judged}")
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:  # no GPU needed: the flags are read, not used
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
        with_tf32 = precision_in_use(torch.float32, "cuda")
        torch.backends.cudnn.allow_tf32 = False
        without = precision_in_use(torch.float32, "cuda")
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    if (with_tf32, without, precision_in_use(torch.float32, "cpu")) != (
        torch.float16,
        torch.float32,
        torch.float32,
    ):
        raise AssertionError(f"TF32 on CUDA: {with_tf32}, without: {without}")


def test_blurred_patch_embedding_judges_ties_against_the_image_dtype() -> None:
    embed = PatchEmbedding(1, 4, 2, (16, 16), anchor_stride=8, anchor_sigma=2.0)
    for dtype in (torch.float32, torch.bfloat16):
        with record_canonicalizations() as rec, torch.no_grad():
            embed.to(dtype)(torch.randn(2, 1, 16, 16, dtype=dtype))
        if [e.input_dtype for e in rec.events] != [dtype]:
            raise AssertionError(
                f"recorded {[e.input_dtype for e in rec.events]} for {dtype} images"
            )


def _bf16_near_ties(batch: int = 3) -> torch.Tensor:
    """bf16 images ``(B, 1, 8, 8)`` whose four stride-2 phases hold the same 16 values in four
    orders (equal norms: a tie), one pixel of phase (1, 0) raised by one bf16 step: a near-tie
    in bf16 (relative margin ≈ 3e-4, below one rounding 7.8e-3) with an image-sized structure,
    so anchoring on another phase changes the output by O(1). The last sample's phase (1, 0)
    is raised by 1/2 instead: a clear margin."""
    gen = torch.Generator().manual_seed(0)
    x = torch.empty(batch, 1, 8, 8, dtype=torch.bfloat16)
    for b in range(batch):
        values = (
            1.0 + torch.randint(0, 128, (16,), generator=gen) / 128.0
        ).bfloat16()  # [1, 2): ulp 2^-7
        for py, px in [(0, 0), (0, 1), (1, 0), (1, 1)]:
            x[b, 0, py::2, px::2] = values[torch.randperm(16, generator=gen)].reshape(4, 4)
        x[b, 0, 1::2, 0::2] += 0.5 if b == batch - 1 else 0.0
        x[b, 0, 3, 2] += 2.0**-7  # phase (1, 0), one bf16 step
    return x


class _RoundsAtOrigin(torch.nn.Module):
    """An upstream layer that is not bit-exact under shifts: ``delta`` lands on pixel (0, 0),
    whatever the input, as the rounding of a reduction in another order would."""

    def __init__(self, delta: float) -> None:
        super().__init__()
        self.delta = delta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[:, :, 0, 0] += self.delta
        return y


def _verify_anchor(model: torch.nn.Module, x: torch.Tensor, tolerance: float):  # type: ignore[no-untyped-def]
    from groupattn.check import verify
    from groupattn.groups import TorusTranslations

    return verify(
        model,
        x,
        TorusTranslations(8, 8),
        elements=[(1, 0), (0, 1), (1, 1), (3, 6)],
        output_type=GridField(),
        output_group=TorusTranslations(4, 4, stride=2),
        up_to_frame=True,
        dtype=x.dtype,
        tolerance=tolerance,
    )


def test_bf16_near_ties_on_exactly_moved_input_are_not_at_risk() -> None:
    # the canonicalizer reads the network's input: the moved copy is an exact permutation, the
    # float64 scores are the same numbers in another order, so no near-tie is at risk
    x = _bf16_near_ties()
    with record_canonicalizations() as rec:
        reference = PolyphaseAnchor(2)(x)
        moved = PolyphaseAnchor(2)(torch.roll(x, (1, 0), dims=(2, 3)))
    if rec.events[0].near_tied is None or rec.events[0].near_tied.tolist() != [True, True, False]:
        raise AssertionError(f"a-priori bf16 near-ties: {rec.events[0].near_tied}")
    if near_ties_between(rec.events[0], rec.events[1]).any():
        raise AssertionError("near-ties on an exactly moved input are reported at risk")
    _check_anchor_moves(reference, moved, (1, 0), 2)  # decided in float64: they move exactly
    report = _verify_anchor(PolyphaseAnchor(2), x, tolerance=0.0)
    if report.ties or report.excused or report.refuted or report.max_error != 0.0:
        raise AssertionError(
            f"ties {report.ties}, excused {report.excused}, error {report.max_error}"
        )


def test_near_ties_between_matches_rows_the_group_permutes() -> None:
    # two samples of two windows each (batch-major rows): a shift swaps the windows of a sample,
    # so row i of the moved batch is compared with the nearest row of the same sample
    x = _bf16_near_ties(3)[[0, 1, 0, 1]]  # (4, 1, 8, 8): windows (w0, w1) of samples 0 and 1
    moved = x[[1, 0, 3, 2]]  # the windows swapped inside each sample, values exact
    with record_canonicalizations() as rec:
        polyphase_anchor(x, 2)
        polyphase_anchor(moved, 2)
    reference, other = rec.events
    if not bool(other.near_tied.all()):  # type: ignore[union-attr]
        raise AssertionError("the rows are meant to be bf16 near-ties")
    if near_ties_between(reference, other, samples=2).any():
        raise AssertionError("exactly permuted windows are reported at risk")
    if not near_ties_between(reference, other).all():  # row against row: different windows
        raise AssertionError("row-by-row comparison of permuted windows should see a perturbation")


def test_bf16_near_ties_after_an_inexact_layer_are_at_risk_and_reported() -> None:
    # two bf16 steps of upstream rounding at a fixed pixel swap the near-tied phases (a real
    # change of frame, O(1) output error): verify reports and excuses exactly those samples
    x = _bf16_near_ties()
    model = torch.nn.Sequential(_RoundsAtOrigin(2.0**-6), PolyphaseAnchor(2))
    report = _verify_anchor(model, x, tolerance=2e-2)
    if report.max_error < 0.1:
        raise AssertionError(
            f"the test is not meaningful: no decision changed ({report.max_error})"
        )
    if sorted(report.excused) != [0, 1] or not all(
        "near-tie" in why for why in report.excused.values()
    ):
        raise AssertionError(f"excused {report.excused}")
    if report.refuted or not any("near-tied sample(s)" in t for t in report.ties):
        raise AssertionError(f"refuted {report.refuted}, ties {report.ties}")
    # a perturbation far beyond rounding is an error, not a near-tie: nothing excuses it
    report = _verify_anchor(
        torch.nn.Sequential(_RoundsAtOrigin(1.0), PolyphaseAnchor(2)), x, tolerance=2e-2
    )
    if not report.refuted or 2 in report.excused:
        raise AssertionError(f"an upstream error is excused as a near-tie: {report.excused}")


# ------------------------------------------------------------------------------- models
def _model_outputs(
    model: torch.nn.Module, precision: str, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and the patch embedding's tokens (the models' only canonicalizer) in ``precision``."""
    dtype, context = PRECISIONS[precision]
    tokens: list[torch.Tensor] = []
    handle = model.patch_embed.register_forward_hook(lambda _m, _a, out: tokens.append(out))
    try:
        with torch.no_grad(), context():
            logits = model.to(dtype)(x.to(dtype))
    finally:
        handle.remove()
    return logits, tokens[0]


def _is_token_roll(a: torch.Tensor, b: torch.Tensor, grid: tuple[int, int]) -> bool:
    a = a.reshape(a.shape[0], *grid, -1)
    b = b.reshape(b.shape[0], *grid, -1)
    found = torch.zeros(a.shape[0], dtype=torch.bool)
    for ty in range(grid[0]):
        for tx in range(grid[1]):
            found |= (torch.roll(a, (ty, tx), dims=(1, 2)) == b).flatten(1).all(dim=1)
    return bool(found.all())


@pytest.mark.parametrize("name", ["vit", "swin", "twins"])
@pytest.mark.parametrize("precision", PRECISION_PARAMS)
def test_shift_models_are_consistent_in_every_precision(name: str, precision: str) -> None:
    torch.manual_seed(0)
    model = create(name).eval()
    x = torch.randn(4, 1, 32, 32)
    logits, tokens = _model_outputs(model, precision, x)
    scale = max(1.0, float(logits.abs().max()))
    for shift in [(1, 0), (5, 27), (13, 3)]:
        moved, moved_tokens = _model_outputs(model, precision, torch.roll(x, shift, dims=(2, 3)))
        # the decision is exact: the anchored token grid is a bit-exact shift of the unshifted one
        if not _is_token_roll(tokens, moved_tokens, model.patch_embed.grid):
            raise AssertionError(
                f"{name} {precision}: the anchored tokens do not move exactly with {shift}"
            )
        if not torch.equal(moved.argmax(dim=1), logits.argmax(dim=1)):
            raise AssertionError(
                f"{name} {precision}: a prediction changed under the shift {shift}"
            )
        # what is left is the rounding of reductions over the rolled tokens (attention, pooling)
        change = float((moved.double() - logits.double()).abs().max())
        if change > _rounding_allowance(precision) * scale:
            raise AssertionError(f"{name} {precision}: logits changed by {change} under {shift}")


@pytest.mark.parametrize("precision", PRECISION_PARAMS)
def test_full_period_anchoring_is_bit_exact(precision: str) -> None:
    # anchoring with the image's own period canonicalizes the whole image: everything after
    # it sees identical values, so the logits are identical bit for bit in every precision
    torch.manual_seed(0)
    model = create("vit").eval()
    conv = model.patch_embed.conv
    model.patch_embed = PatchEmbedding(
        1, 32, 4, (32, 32), norm="l4", anchor_stride=32, anchor_sigma=4.0
    )
    model.patch_embed.conv = conv
    x = torch.randn(4, 1, 32, 32)
    logits, _ = _model_outputs(model, precision, x)
    for shift in [(1, 0), (5, 27)]:
        moved, _ = _model_outputs(model, precision, torch.roll(x, shift, dims=(2, 3)))
        if not torch.equal(moved, logits):
            raise AssertionError(
                f"{precision}: logits changed by {float((moved - logits).abs().max())}"
            )


@pytest.mark.parametrize("precision", PRECISION_PARAMS)
def test_gsa_with_anchored_downsampling_is_consistent_under_rotations(precision: str) -> None:
    torch.manual_seed(0)
    model = GSANet(
        point_group="C4", channels=4, num_heads=1, image_size=16, downsample=2, depth=1
    ).eval()
    dtype, context = PRECISIONS[precision]
    model = model.to(dtype)
    x = torch.randn(4, 1, 16, 16).to(dtype)
    with torch.no_grad(), context():
        logits = model(x)
        scale = max(1.0, float(logits.abs().max()))
        for moved_x in (
            torch.rot90(x, 1, (2, 3)),
            torch.roll(x, (1, 3), dims=(2, 3)),
            torch.rot90(x, 2, (2, 3)),
        ):
            moved = model(moved_x)
            if not torch.equal(moved.argmax(dim=1), logits.argmax(dim=1)):
                raise AssertionError(f"gsa {precision}: a prediction changed")
            change = float((moved.double() - logits.double()).abs().max())
            if change > _rounding_allowance(precision) * scale:
                raise AssertionError(f"gsa {precision}: logits changed by {change}")
