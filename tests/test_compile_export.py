"""``torch.compile``, ``torch.export`` and no host synchronisation in forward passes (#15).

Every public layer (the ``LAYERS`` of ``test_edge_inputs``), every canonicalizer and every
registry model (equivariant and baseline):

* compiles with ``fullgraph=True`` (no graph break) and gives the eager outputs (relative
  error ≤ 1e-5 in float32). CI uses ``backend="aot_eager"`` — Dynamo's graph capture and
  AOT autograd, without code generation; ViT also runs on the default inductor backend
  (``slow``). Registry models compile a whole training step (forward and backward; logits
  and every gradient compared with eager);
* exports with ``torch.export.export(module.eval(), (x,))``, and the exported program
  gives the eager outputs;
* runs its eager forward pass on fake tensors (``FakeTensorMode``): a fake tensor has no
  values, so anything that reads one on the host — ``.item()``, ``.tolist()``,
  ``int(t)``, ``bool(t)``, ``if t:``, ``nonzero``, ``unique`` — raises. Unlike ``export``
  and ``compile``, this also sees code that reads values only when not tracing (behind
  ``torch.compiler.is_compiling()``), so it finds every host synchronisation of the
  forward pass as it runs in eager mode.

Exporting first must not leave fake tensors behind in the library's caches: an eager call
after ``export`` gives real outputs (it used to give ``FakeTensor`` outputs).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from test_edge_inputs import LAYERS
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from groupattn.canonical import (
    AdaptivePolyphaseDownsample,
    AdaptivePolyphaseUpsample,
    ArgmaxCanonicalizer,
    PolyphaseAnchor,
    PolyphaseUnanchor,
)
from groupattn.groups import CyclicGroup, DihedralGroup
from groupattn.models import create, get_spec, list_models
from groupattn.positional import point_group_tables, relative_geometry, window_tiling
from groupattn.positional._constants import constant_cache, is_real
from groupattn.testing import relative_error, seed_everything

#: "cuda" only where a GPU is present (no skip marks: the list is built conditionally).
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]

#: The tolerance of compiled and exported outputs against eager ones (float32).
RTOL = 1e-5

Inputs = Callable[[], tuple[Any, ...]]
Case = tuple[str, Callable[[], nn.Module], Inputs]

#: Forward passes that read a tensor's values on the host in eager mode (code outside the
#: files this suite may change): ``case name → reason``. Marked ``xfail(strict=True)``, so
#: they fail loudly once fixed.
EAGER_HOST_SYNC: dict[str, str] = {
    # (LiftingSelfAttention-local read its window bias to choose the factorised kernel; it
    # now reads values only on real CPU tensors, where that is no synchronisation)
}

#: Registry models built from escnn modules (code outside the files this suite may change):
#: escnn's ``GroupPooling`` and ``InnerBatchNorm`` slice their input with ``LongTensor``
#: buffers (``input[:, indices[0]:indices[1]]``), which reads tensor values on the host:
#: ``torch.export`` and ``torch.compile(fullgraph=True)`` meet a data-dependent shape there
#: (``GuardOnDataDependentSymNode``), and a fake-tensor forward cannot run it.
#: groupattn's checker is unaffected: it keeps escnn modules whole, as opaque operators
#: checked by their contracts (``tests/test_escnn_hybrid.py``). ``case name → reason``,
#: marked ``xfail(strict=True)``, so they fail loudly once escnn indexes with Python ints.
ESCNN_INDEX_BUFFERS = {
    f"escnn_hybrid-{kind}": (
        "escnn's GroupPooling / InnerBatchNorm slice by LongTensor index buffers: a host read, "
        "data-dependent shapes under torch.export / torch.compile"
    )
    for kind in ("equivariant", "baseline")
}
EAGER_HOST_SYNC.update(ESCNN_INDEX_BUFFERS)


def _xfail_if_escnn(request: pytest.FixtureRequest, name: str) -> None:
    if name in ESCNN_INDEX_BUFFERS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=ESCNN_INDEX_BUFFERS[name]))


# ------------------------------------------------------------------------------ cases
def _corner_score(x: torch.Tensor) -> torch.Tensor:
    """A score for orientation canonicalization: the bottom-right pixel of channel 0."""
    return x[:, 0, -1, -1] + 0.5 * x[:, 0, 0, -1]


def _frame(batch: int, stride: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(3)
    return torch.randint(0, stride, (batch, 2), generator=generator)


def _images(*shape: int) -> Inputs:
    return lambda: (torch.randn(*shape),)


CANONICALIZERS: list[Case] = [
    ("PolyphaseAnchor", lambda: PolyphaseAnchor(2), _images(3, 2, 8, 8)),
    ("PolyphaseAnchor-l4-tokens", lambda: PolyphaseAnchor(2, "l4", grid=(4, 4)), _images(3, 16, 5)),
    ("PolyphaseAnchor-max", lambda: PolyphaseAnchor(4, "max"), _images(3, 2, 8, 8)),
    (
        "PolyphaseUnanchor",
        lambda: PolyphaseUnanchor(),
        lambda: (torch.randn(3, 2, 8, 8), _frame(3, 2)),
    ),
    (
        "PolyphaseUnanchor-tokens",
        lambda: PolyphaseUnanchor(grid=(4, 4)),
        lambda: (torch.randn(3, 16, 5), _frame(3, 2)),
    ),
    ("AdaptivePolyphaseDownsample", lambda: AdaptivePolyphaseDownsample(2), _images(3, 2, 8, 8)),
    (
        "AdaptivePolyphaseUpsample",
        lambda: AdaptivePolyphaseUpsample(2),
        lambda: (torch.randn(3, 2, 4, 4), _frame(3, 2)),
    ),
    (
        "ArgmaxCanonicalizer-C4",
        lambda: ArgmaxCanonicalizer(CyclicGroup(4), _corner_score),
        _images(3, 2, 5, 5),
    ),
    (
        "ArgmaxCanonicalizer-D4",
        lambda: ArgmaxCanonicalizer(DihedralGroup(4), _corner_score),
        _images(3, 1, 6, 6),
    ),
]
CANONICALIZER_IDS = [name for name, _, _ in CANONICALIZERS]


def _batch_of_two(make: Callable[[int], torch.Tensor]) -> Inputs:
    return lambda: (make(2),)


LAYER_CASES: list[Case] = [(name, build, _batch_of_two(make)) for name, build, make in LAYERS]
LAYER_IDS = [name for name, _, _ in LAYER_CASES]

MODELS = [(name, eq) for name in list_models() for eq in (True, False)]
MODEL_IDS = [f"{name}-{'equivariant' if eq else 'baseline'}" for name, eq in MODELS]


def _model_case(name: str, equivariant: bool) -> Case:
    shape = get_spec(name).input_shape
    return (
        f"{name}-{'equivariant' if equivariant else 'baseline'}",
        lambda: create(name, equivariant=equivariant),
        lambda: (torch.randn(2, *shape),),
    )


MODEL_CASES = [_model_case(name, eq) for name, eq in MODELS]
MODEL_NAMES = {name for name, _, _ in MODEL_CASES}
ALL_CASES = [*LAYER_CASES, *CANONICALIZERS, *MODEL_CASES]
ALL_IDS = [name for name, _, _ in ALL_CASES]


# ---------------------------------------------------------------------------- helpers
def _tensors(out: object) -> list[torch.Tensor]:
    """The tensors of an output: a tensor, a ``Canonicalized`` or any tuple of tensors."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, tuple | list):
        return [t for item in out for t in _tensors(item)]
    raise TypeError(f"test_compile_export: expected tensors in the output, got {type(out)}")


def _assert_matches(actual: object, expected: object, what: str) -> None:
    """Equal structure, shapes and dtypes; integers exact, floats within ``RTOL`` (relative)."""
    got, want = _tensors(actual), _tensors(expected)
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for i, (a, e) in enumerate(zip(got, want)):
        assert type(a) is torch.Tensor, f"{what}: output {i} is a {type(a).__name__}"
        assert a.shape == e.shape and a.dtype == e.dtype, (
            f"{what}: output {i} is {a.dtype} {tuple(a.shape)}, expected {e.dtype} {tuple(e.shape)}"
        )
        if not e.is_floating_point():
            assert torch.equal(a.cpu(), e.cpu()), f"{what}: integer output {i} differs"
            continue
        finite = torch.isfinite(e)
        assert torch.equal(finite, torch.isfinite(a)), f"{what}: output {i} non-finite elsewhere"
        error = relative_error(a[finite], e[finite]) if bool(finite.any()) else 0.0
        assert error <= RTOL, f"{what}: output {i} relative error {error:.3g} > {RTOL:g}"


def _assert_gradients_match(
    names: list[str], actual: list[torch.Tensor], expected: list[torch.Tensor], what: str
) -> None:
    """Each parameter's gradient within ``RTOL`` of its own scale, floored at 1 % of the
    model's largest gradient: a gradient that is zero in exact arithmetic (the last bias
    of a positional MLP shifts every logit of a row alike, which softmax ignores) is
    rounding noise whose size depends on the kernel's summation order."""
    floor = 0.01 * max((float(e.detach().abs().max()) for e in expected if e.numel()), default=0.0)
    for name, got, want in zip(names, actual, expected):
        assert got.shape == want.shape and got.dtype == want.dtype, (
            f"{what} of {name}: shape or dtype"
        )
        scale = max(float(want.detach().abs().max()) if want.numel() else 0.0, floor, 1e-30)
        error = (
            float((got.detach().double() - want.detach().double()).abs().max()) / scale
            if want.numel()
            else 0.0
        )
        assert error <= RTOL, f"{what} of {name}: relative error {error:.3g} > {RTOL:g}"


def _build(case: Case, device: str, train: bool = False) -> tuple[nn.Module, tuple[Any, ...]]:
    _, build, inputs = case
    seed_everything(0)
    module = build().to(device).train(train)
    args = tuple(a.to(device) for a in inputs())
    return module, args


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    """Forget earlier compilations: every case shares the layers' code objects."""
    torch._dynamo.reset()


def _compiled(module: nn.Module, backend: str = "aot_eager") -> Callable[..., Any]:
    return torch.compile(module, backend=backend, fullgraph=True)  # type: ignore[no-any-return]


def _xfail_if_syncs(request: pytest.FixtureRequest, name: str) -> None:
    if name in EAGER_HOST_SYNC:
        request.applymarker(pytest.mark.xfail(strict=True, reason=EAGER_HOST_SYNC[name]))


# ---------------------------------------------------------------- compile: layers, canons
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "case", [*LAYER_CASES, *CANONICALIZERS], ids=[*LAYER_IDS, *CANONICALIZER_IDS]
)
def test_compiles_fullgraph_and_matches_eager(case: Case, device: str) -> None:
    module, args = _build(case, device)
    with torch.no_grad():
        expected = module(*args)
        actual = _compiled(module)(*args)
    _assert_matches(actual, expected, f"{case[0]} compiled")


# ------------------------------------------------------------------- export: everything
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_exports_and_matches_eager(request: pytest.FixtureRequest, case: Case, device: str) -> None:
    _xfail_if_escnn(request, case[0])
    module, args = _build(case, device)
    with torch.no_grad():
        expected = module(*args)
    program = torch.export.export(module.eval(), args)
    with torch.no_grad():
        actual = program.module()(*args)
    _assert_matches(actual, expected, f"{case[0]} exported")
    with torch.no_grad():  # and the module itself still runs on real tensors afterwards
        _assert_matches(module(*args), expected, f"{case[0]} eager after export")


# ----------------------------------------------------------------------- no host sync
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_eager_forward_has_no_host_sync(request: pytest.FixtureRequest, case: Case) -> None:
    _xfail_if_syncs(request, case[0])
    module, args = _build(case, "cpu", train=case[0] in MODEL_NAMES)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = tuple(mode.from_tensor(a) for a in args)
        out = module(*fake)
        if case[0] in MODEL_NAMES:  # a training step: the backward pass too
            out.float().square().mean().backward()
    assert all(isinstance(t, FakeTensor) for t in _tensors(out))


# -------------------------------------------------------------- models: training step
def _training_step(module: nn.Module, forward: Callable[..., Any], x: torch.Tensor) -> Any:
    module.zero_grad(set_to_none=True)
    logits = forward(x)
    loss = torch.nn.functional.cross_entropy(logits, torch.arange(x.shape[0]) % logits.shape[1])
    loss.backward()
    grads = [p.grad.clone() for p in module.parameters() if p.grad is not None]
    return logits.detach(), loss.detach(), grads


#: Smaller presets of the same architecture for the CI training steps: every block type the
#: preset has, fewer repeats (Swin and Twins keep two blocks in the first stage: the shifted
#: windows and the local/global alternation, then a patch merging and one block).
SMALL = {
    "vit": {"depth": 1},
    "group_vit": {"depth": 1},
    "p4_vit": {"depth": 1},
    "gsa": {"stem_dilations": (1,)},
    "escnn_hybrid": {"stem_dilations": (1,)},
    "swin": {"depths": (2, 1)},
    "twins": {"depths": (2, 1)},
    "group_swin": {"depths": (2, 1)},
    "p4_swin": {"depths": (2, 1)},
}
#: Training steps compiled in CI (one translation and one rotation model; about 7 s on one
#: core). The others cost 4 to 14 s each, mostly Dynamo tracing custom autograd functions and
#: the windows kernels: they run with ``-m slow``, together with the full presets.
CI_TRAINING_STEPS = {"vit-equivariant", "group_vit-equivariant"}


def _training_cases() -> list[Any]:
    params = []
    for name, equivariant in MODELS:
        case_id = f"{name}-{'equivariant' if equivariant else 'baseline'}"
        for preset in ("small", "preset"):
            kwargs = SMALL[name] if preset == "small" else {}
            marks: tuple[Any, ...] = (
                () if preset == "small" and case_id in CI_TRAINING_STEPS else (pytest.mark.slow,)
            )
            if case_id in ESCNN_INDEX_BUFFERS:
                marks = (
                    pytest.mark.xfail(strict=True, reason=ESCNN_INDEX_BUFFERS[case_id]),
                    *marks,
                )
            params.append(
                pytest.param(name, equivariant, kwargs, marks=marks, id=f"{case_id}-{preset}")
            )
    return params


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("name", "equivariant", "kwargs"), _training_cases())
def test_model_training_step_compiles_and_matches_eager(
    name: str, equivariant: bool, kwargs: dict[str, Any], device: str
) -> None:
    shape = get_spec(name).input_shape
    case: Case = (
        name,
        lambda: create(name, equivariant=equivariant, **kwargs),
        lambda: (torch.randn(2, *shape),),
    )
    module, (x,) = _build(case, device, train=True)
    expected = _training_step(module, module, x)
    actual = _training_step(module, _compiled(module), x)
    assert len(actual[2]) == len(expected[2]) == sum(1 for _ in module.parameters())
    _assert_matches(actual[:2], expected[:2], f"{name} compiled training step")
    names = [param for param, _ in module.named_parameters()]
    _assert_gradients_match(names, list(actual[2]), list(expected[2]), f"{name} compiled gradient")


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", MODEL_CASES, ids=MODEL_IDS)
def test_model_compiles_for_inference(
    request: pytest.FixtureRequest, case: Case, device: str
) -> None:
    _xfail_if_escnn(request, case[0])
    module, args = _build(case, device)
    with torch.no_grad():
        _assert_matches(_compiled(module)(*args), module(*args), f"{case[0]} compiled")


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_vit_on_inductor(device: str) -> None:
    module, (x,) = _build(_model_case("vit", True), device)
    compiled = torch.compile(module, fullgraph=True)
    with torch.no_grad():
        _assert_matches(compiled(x), module(x), "vit on inductor")
    module.train()
    expected = _training_step(module, module, x)
    actual = _training_step(module, compiled, x)
    _assert_matches(actual[:2], expected[:2], "vit on inductor, training step")
    names = [param for param, _ in module.named_parameters()]
    _assert_gradients_match(names, list(actual[2]), list(expected[2]), "vit on inductor, gradient")


# ------------------------------------------------------------- caches under tracing
def _clear_table_caches() -> None:
    for table in (point_group_tables, relative_geometry, window_tiling):
        table.cache_clear()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "name", ["GroupSelfAttention-local", "LiftingSelfAttention-local", "GroupBlock"]
)
def test_export_first_leaves_no_fake_tensor_in_the_caches(name: str) -> None:
    case = next(c for c in LAYER_CASES if c[0] == name)
    _clear_table_caches()
    module, args = _build(case, "cpu")
    program = torch.export.export(module.eval(), args)  # the first call of all: tables built here
    with torch.no_grad():
        eager = module(*args)
    assert type(eager) is torch.Tensor
    _clear_table_caches()
    fresh, _ = _build(case, "cpu")
    with torch.no_grad():
        _assert_matches(eager, fresh(*args), f"{name} after export")
        _assert_matches(program.module()(*args), eager, f"{name} exported")


def test_constant_cache_keeps_only_real_tensors() -> None:
    calls: list[int] = []

    @constant_cache(maxsize=2)
    def table(n: int) -> torch.Tensor:
        calls.append(n)
        return torch.arange(n)

    with FakeTensorMode():
        assert isinstance(table(3), FakeTensor)
    assert table.cache_info().currsize == 0  # type: ignore[attr-defined]
    with torch.device("meta"):
        assert table(3).device.type == "cpu"  # tables are built on the CPU
    assert torch.equal(table(3), torch.arange(3))
    assert calls == [3, 3]
    table(4), table(5)
    assert table.cache_info().currsize == 2  # type: ignore[attr-defined]
    table.cache_clear()  # type: ignore[attr-defined]
    assert table.cache_info() == (0, 0, 2, 0)  # type: ignore[attr-defined]


def test_is_real() -> None:
    assert is_real((torch.ones(1), {"a": [torch.zeros(2)]}, 3))
    assert not is_real(torch.ones(1, device="meta"))
    with FakeTensorMode():
        assert not is_real([torch.ones(1)])
    geometry = relative_geometry(DihedralGroup(4), 4, 4, 3, True)
    assert is_real(geometry)


def test_no_warning_about_traced_caches() -> None:
    """Dynamo warned that it ignores ``lru_cache`` on the geometry tables; none left."""
    case = next(c for c in LAYER_CASES if c[0] == "GroupSelfAttention")
    module, args = _build(case, "cpu")
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        _compiled(module)(*args)
    assert not [w for w in caught if "lru_cache" in str(w.message)]
