"""escnn and groupattn in one network (#13, item 5).

Contracts of escnn's modules (each claim checked numerically in float64 for every element
of C4 and D4), what is *not* certified (mis-declared types, non-equivariant modules, strided
convolutions on grids whose windows do not map onto windows, inexact filters), the
``GeometricTensor`` adapters, and the ``escnn_hybrid`` registry model.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

escnn = pytest.importorskip("escnn")

import torch  # noqa: E402
from escnn import gspaces  # noqa: E402
from escnn import nn as enn  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

from groupattn import MissingExtraError  # noqa: E402
from groupattn.actions import GridField, InvariantField  # noqa: E402
from groupattn.check import Status, certify, verify  # noqa: E402
from groupattn.contracts import contract_of  # noqa: E402
from groupattn.groups import CyclicGroup, DihedralGroup, PointGroup, group_from_name  # noqa: E402
from groupattn.interop import (  # noqa: E402
    GeometricGroupAttention,
    GeometricGroupBlock,
    GeometricInvariantReadout,
    WindowedGridField,
    escnn_compatibility,
    escnn_grid_type,
    exact_steerable,
    exportable,
    refresh_filters,
    register_escnn_contracts,
    steerability_error,
    to_escnn_element,
)
from groupattn.models import create, get_spec, list_models  # noqa: E402
from groupattn.nn import OrbitPooledLinear  # noqa: E402
from groupattn.testing import relative_error  # noqa: E402

register_escnn_contracts()

C4, D4 = CyclicGroup(4), DihedralGroup(4)
GROUPS = [C4, D4]
TOL = 1e-10  # float64, as DESIGN.md asks


def _gspace(group: PointGroup) -> Any:
    return gspaces.rot2dOnR2(4) if isinstance(group, CyclicGroup) else gspaces.flipRot2dOnR2(4)


def _types(group: PointGroup, fields: int = 2) -> tuple[Any, Any, Any]:
    gs = _gspace(group)
    trivial = enn.FieldType(gs, [gs.trivial_repr] * 2)
    regular = enn.FieldType(gs, [gs.regular_repr] * fields)
    return gs, trivial, regular


def _settle(module: Any, in_type: Any, size: int = 9) -> Any:
    """Random weights and running statistics, then eval mode in float64."""
    torch.manual_seed(1)
    for p in module.parameters():
        nn.init.normal_(p, std=0.5)
    module.train()
    with torch.no_grad():
        for _ in range(2):
            module(enn.GeometricTensor(torch.randn(4, in_type.size, size, size), in_type))
    module.eval().double()
    refresh_filters(module)
    return module


def _conv(in_type: Any, out_type: Any, **kwargs: Any) -> Any:
    # recompute: escnn otherwise shares sampled bases between convolutions (and their dtype)
    with escnn_compatibility():
        conv = enn.R2Conv(in_type, out_type, kwargs.pop("kernel_size", 3), recompute=True, **kwargs)
    return exportable(exact_steerable(conv))


def _numerical_error(module: Any, group: PointGroup, size: int = 9) -> float:
    """max over all elements of |f(g·x) − g·f(x)| / |g·f(x)|, with our field types' actions."""
    contract = contract_of(module, group)
    assert contract.kind == Status.EQUIVARIANT, contract.describe()
    in_t: Any = contract.input_type
    out_t: Any = contract.output_type
    torch.manual_seed(2)
    x = torch.randn(2, module.in_type.size, size, size, dtype=torch.float64)
    with torch.no_grad():
        y = module(enn.GeometricTensor(x, module.in_type)).tensor
        worst = 0.0
        for g in group.elements():
            moved = module(enn.GeometricTensor(in_t.act(group, g, x), module.in_type)).tensor
            expected = out_t.act(group, g, y)
            worst = max(worst, float((moved - expected).abs().max() / expected.abs().max()))
    return worst


def _modules(group: PointGroup) -> dict[str, tuple[Any, Any]]:
    gs, trivial, regular = _types(group)
    irreps = enn.FieldType(gs, [gs.irrep(1, 1) if group == D4 else gs.irrep(1)] * 2)
    return {
        "R2Conv-lift": (_conv(trivial, regular, kernel_size=5, padding=2), trivial),
        "R2Conv-bias": (_conv(regular, regular, kernel_size=3, padding=1, bias=True), regular),
        "R2Conv-dilated": (_conv(regular, regular, kernel_size=3, padding=2, dilation=2), regular),
        "R2Conv-irreps": (_conv(irreps, regular, kernel_size=3, padding=1), irreps),
        "ReLU": (enn.ReLU(regular), regular),
        "ELU": (enn.ELU(regular), regular),
        "LeakyReLU": (enn.LeakyReLU(regular, 0.1), regular),
        "PointwiseNonLinearity": (enn.PointwiseNonLinearity(regular, "p_tanh"), regular),
        "NormNonLinearity": (enn.NormNonLinearity(irreps, "n_relu"), irreps),
        "GroupPooling": (enn.GroupPooling(regular), regular),
        "NormPool": (enn.NormPool(irreps), irreps),
        "InnerBatchNorm": (enn.InnerBatchNorm(regular), regular),
        "NormBatchNorm": (enn.NormBatchNorm(irreps), irreps),
        "IIDBatchNorm2d": (enn.IIDBatchNorm2d(regular), regular),
        "IdentityModule": (enn.IdentityModule(regular), regular),
        "SequentialModule": (
            enn.SequentialModule(
                _conv(trivial, regular, kernel_size=3, padding=1),
                enn.InnerBatchNorm(regular),
                enn.ReLU(regular),
                enn.GroupPooling(regular),
            ),
            trivial,
        ),
    }


MODULE_NAMES = list(_modules(C4))


# ---------------------------------------------------------------- every claim, every element
@pytest.mark.parametrize("group", GROUPS, ids=repr)
@pytest.mark.parametrize("name", MODULE_NAMES)
def test_contract_claim_holds_for_every_element(name: str, group: PointGroup) -> None:
    module, in_type = _modules(group)[name]
    _settle(module, in_type)
    contract = contract_of(module, group)
    assert contract.kind == Status.EQUIVARIANT, contract.describe()
    assert contract.input_type == escnn_grid_type(module.in_type, group)
    assert contract.output_type == escnn_grid_type(module.out_type, group)
    assert _numerical_error(module, group) <= TOL


@pytest.mark.parametrize("group", GROUPS, ids=repr)
def test_our_action_is_escnns_transform(group: PointGroup) -> None:
    gs, _, regular = _types(group)
    field = escnn_grid_type(regular, group)
    x = torch.randn(2, regular.size, 6, 6, dtype=torch.float64)
    for g in group.elements():
        theirs = enn.GeometricTensor(x, regular).transform(to_escnn_element(group, g, gs)).tensor
        assert torch.allclose(field.act(group, g, x), theirs, rtol=0, atol=1e-12)


def test_a_d4_module_is_certified_under_its_rotations() -> None:
    _, trivial, regular = _types(D4)
    conv = _settle(_conv(trivial, regular, kernel_size=3, padding=1), trivial)
    assert contract_of(conv, C4).kind == Status.EQUIVARIANT
    assert _numerical_error(conv, C4) <= TOL
    assert contract_of(conv, CyclicGroup(2)).kind == Status.EQUIVARIANT
    assert contract_of(conv, DihedralGroup(1)).kind == Status.EQUIVARIANT
    assert _numerical_error(conv, DihedralGroup(1)) <= TOL


# ---------------------------------------------------------------- what is not certified
def test_escnn_filters_are_only_float32_steerable_until_projected() -> None:
    _, trivial, regular = _types(C4)
    with escnn_compatibility():
        conv = enn.R2Conv(trivial, regular, 5, padding=2, recompute=True)
    nn.init.normal_(conv.weights)
    error = steerability_error(conv, C4)
    assert 1e-9 < error < 1e-5  # escnn samples its basis in float32
    contract = contract_of(conv, C4)
    assert contract.kind == Status.UNVERIFIED and "exact_steerable" in (contract.reason or "")
    before = conv.expand_parameters()[0].detach().clone()
    exact_steerable(conv)
    after = conv.expand_parameters()[0].detach()
    assert float((after - before).abs().max() / before.abs().max()) < 1e-5  # the same filter
    # escnn's own eval-mode filter is a float32 matrix product: close, not exact
    conv.eval()
    assert steerability_error(conv, C4) < 1e-6
    refresh_filters(conv)  # expanded in float64, averaged, rounded: exact to the last bit
    assert steerability_error(conv, C4) == 0.0
    assert contract_of(conv, C4).kind == Status.EQUIVARIANT


def test_a_tampered_eval_filter_is_not_certified() -> None:
    _, trivial, regular = _types(C4)
    conv = _settle(_conv(trivial, regular, kernel_size=3, padding=1), trivial)
    assert contract_of(conv, C4).kind == Status.EQUIVARIANT
    with torch.no_grad():
        conv.filter[0, 0, 0, 0] += 0.1  # e.g. a state dict with a foreign cached filter
    assert contract_of(conv, C4).kind == Status.UNVERIFIED
    assert _raw_error(conv, C4) > 1e-6


def _raw_error(module: Any, group: PointGroup, size: int = 9) -> float:
    in_t = escnn_grid_type(module.in_type, group)
    out_t = escnn_grid_type(module.out_type, group)
    x = torch.randn(2, module.in_type.size, size, size, dtype=torch.float64)
    with torch.no_grad():
        y = module(enn.GeometricTensor(x, module.in_type)).tensor
        errors = [
            float(
                (
                    module(enn.GeometricTensor(in_t.act(group, g, x), module.in_type)).tensor
                    - out_t.act(group, g, y)
                )
                .abs()
                .max()
                / y.abs().max()
            )
            for g in group.elements()
        ]
    return max(errors)


def test_misdeclared_types_are_not_certified() -> None:
    gs, trivial, regular = _types(C4)
    conv = _settle(_conv(trivial, regular, kernel_size=3, padding=1), trivial)
    # the same tensor sizes, declared as trivial fields: the filter does not satisfy that constraint
    conv.out_type = enn.FieldType(gs, [gs.trivial_repr] * regular.size)
    contract = contract_of(conv, C4)
    assert contract.kind == Status.UNVERIFIED and "steerability" in (contract.reason or "")
    # a group pooling whose fields are declared trivial: the max over a field would not be a pooling
    pool = enn.GroupPooling(regular)
    pool.in_type = enn.FieldType(gs, [gs.irrep(1)] * (regular.size // 2))
    assert contract_of(pool, C4).kind == Status.UNVERIFIED


class _Flip(enn.EquivariantModule):
    """Declares regular → regular but flips the image: not equivariant under C4."""

    def __init__(self, field_type: Any) -> None:
        super().__init__()
        self.in_type = self.out_type = field_type

    def forward(self, x: enn.GeometricTensor) -> enn.GeometricTensor:
        return enn.GeometricTensor(x.tensor.flip(-1), self.out_type)

    def evaluate_output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return input_shape


class _Network(nn.Module):
    """A plain-tensor network around an escnn module, ending in group pooling."""

    def __init__(self, body: Any, in_type: Any, out_type: Any) -> None:
        super().__init__()
        self.body, self.in_type = body, in_type
        self.pool = enn.GroupPooling(out_type)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.body(enn.GeometricTensor(x, self.in_type))).tensor.to(x.dtype)


def test_a_non_equivariant_module_in_a_sequential_module_is_not_certified() -> None:
    _, trivial, regular = _types(C4)
    seq = enn.SequentialModule(_conv(trivial, regular, kernel_size=3, padding=1), _Flip(regular))
    seq = _settle(seq, trivial)
    contract = contract_of(seq, C4)
    assert contract.kind == Status.UNVERIFIED and "_Flip" in (contract.reason or "")
    net = _Network(seq, trivial, regular).float().eval()
    refresh_filters(net)
    x = torch.randn(2, 2, 9, 9)
    cert = certify(net, x, "c4", verify=True)
    assert not cert.certified
    assert cert.verification is not None and cert.verification.max_error > 1e-6


def test_subclasses_replaced_forwards_and_in_place_modules_are_not_trusted() -> None:
    _, _, regular = _types(C4)

    class MyReLU(enn.ReLU):
        pass

    assert contract_of(MyReLU(regular), C4).kind == Status.UNVERIFIED
    relu = enn.ReLU(regular)
    relu.forward = lambda x: x  # type: ignore[method-assign]
    assert contract_of(relu, C4).kind == Status.UNVERIFIED
    assert contract_of(enn.ReLU(regular, inplace=True), C4).kind == Status.UNVERIFIED
    odd = enn.PointwiseNonLinearity(regular, "p_relu")
    odd._function = lambda t: t.flip(-1)
    assert contract_of(odd, C4).kind == Status.UNVERIFIED


def test_groups_the_grid_does_not_carry_or_the_gspace_does_not_constrain() -> None:
    _, trivial, regular = _types(C4)
    conv = _settle(_conv(trivial, regular, kernel_size=3, padding=1), trivial)
    # reflections are not constrained by a C4 gspace: broken, and measurably so
    contract = contract_of(conv, D4)
    assert contract.kind == Status.BROKEN and "constrained only for C4" in (contract.reason or "")
    # translations on a torus: escnn pads with zeros, nothing is claimed
    assert contract_of(conv, group_from_name("p4", (9, 9))).kind == Status.UNVERIFIED
    assert contract_of(conv, CyclicGroup(8)).kind == Status.UNVERIFIED
    trivial_gs = gspaces.trivialOnR2()
    plain = enn.R2Conv(
        enn.FieldType(trivial_gs, [trivial_gs.trivial_repr]),
        enn.FieldType(trivial_gs, [trivial_gs.trivial_repr] * 3),
        3,
        padding=1,
        recompute=True,
    )
    assert contract_of(plain, C4).kind == Status.BROKEN
    assert contract_of(enn.ReLU(plain.out_type), C4).kind == Status.UNVERIFIED


@pytest.mark.parametrize("group", GROUPS, ids=repr)
def test_a_strided_conv_is_certified_only_where_windows_map_onto_windows(
    group: PointGroup,
) -> None:
    _, trivial, regular = _types(group)
    conv = _settle(_conv(trivial, regular, kernel_size=5, padding=2, stride=2), trivial, size=9)
    declared = contract_of(conv, group).input_type
    assert isinstance(declared, WindowedGridField)
    net = _Network(conv, trivial, regular).float().eval()
    refresh_filters(net)
    name = "c4" if group == C4 else "d4"
    # side 21: (21 + 4 − 5) is even, the output grid is centred: certified and exact
    good = certify(net, torch.randn(2, 2, 21, 21), name, verify=True)
    assert good.verdict == Status.EQUIVARIANT, good.to_text()
    assert good.verification is not None and good.verification.max_error <= TOL
    # side 20: the windows are not symmetric about the centre: not certified, and broken
    bad = certify(net, torch.randn(2, 2, 20, 20), name, verify=True)
    assert not bad.certified
    assert "does not move as the declared" in (bad.reason or ""), bad.reason
    assert bad.verification is not None and bad.verification.max_error > 1e-6


@pytest.mark.parametrize("mode", ["zeros", "circular", "reflect", "replicate"])
def test_every_padding_mode_is_symmetric_about_the_centre(mode: str) -> None:
    _, trivial, regular = _types(D4)
    conv = _settle(_conv(trivial, regular, kernel_size=3, padding=1, padding_mode=mode), trivial)
    assert _numerical_error(conv, D4) <= TOL


# ---------------------------------------------------------------- GeometricTensor adapters
@pytest.mark.parametrize("group", GROUPS, ids=repr)
def test_group_attention_between_escnn_modules(group: PointGroup) -> None:
    _, _, regular = _types(group, fields=4)
    wider = enn.FieldType(regular.gspace, [regular.gspace.regular_repr] * 6)
    for layer in (
        GeometricGroupAttention(regular, wider, num_heads=2, neighbourhood=3),
        GeometricGroupBlock(regular, num_heads=2, neighbourhood=None),
    ):
        torch.manual_seed(3)
        layer = layer.double().eval()
        contract = layer.contract(group)
        assert contract.kind == Status.EQUIVARIANT, contract.describe()
        assert contract.output_type == escnn_grid_type(layer.out_type, group)
        assert _numerical_error(layer, group, size=7) <= TOL


def test_adapter_refuses_wrong_types() -> None:
    from groupattn import ConfigurationError, ShapeError

    gs, trivial, regular = _types(C4)
    with pytest.raises(ConfigurationError, match="regular representation"):
        GeometricGroupAttention(trivial)
    layer = GeometricGroupAttention(regular, num_heads=1)
    with pytest.raises(ShapeError, match="GeometricTensor"):
        layer(torch.randn(1, regular.size, 5, 5))
    other = enn.FieldType(gs, [gs.regular_repr] * 2 + [gs.trivial_repr] * 0)
    assert other == regular  # the same type is accepted …
    with pytest.raises(ShapeError, match="expected a GeometricTensor of"):
        layer(
            enn.GeometricTensor(torch.randn(1, 8, 5, 5), enn.FieldType(gs, [gs.trivial_repr] * 8))
        )


@pytest.mark.parametrize("group", GROUPS, ids=repr)
def test_invariant_readout_between_escnn_modules(group: PointGroup) -> None:
    """escnn conv → ``GeometricInvariantReadout(OrbitPooledLinear)``: invariant under every
    element, exactly as its contract says, and the certificate covers the whole network."""
    _, trivial, regular = _types(group, fields=3)
    conv = _conv(trivial, regular, kernel_size=3, padding=1)
    readout = GeometricInvariantReadout(OrbitPooledLinear(3, 5, group), regular)
    contract = readout.contract(group)
    assert contract.kind == Status.INVARIANT, contract.describe()
    assert contract.input_type == escnn_grid_type(regular, group)
    assert contract.output_type == InvariantField()

    class Network(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.readout = conv, readout

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.readout(self.conv(enn.GeometricTensor(x, trivial)))

    network = Network().double().eval()
    refresh_filters(network)
    x = torch.randn(2, trivial.size, 9, 9, dtype=torch.float64)
    field = GridField()
    with torch.no_grad():
        y = network(x)
        assert y.shape == (2, 5)
        for g in group.elements():
            assert relative_error(network(field.act(group, g, x)), y) <= TOL
    cert = certify(network, x, group.name.lower())
    assert cert.verdict == Status.INVARIANT, cert.to_text()


def test_invariant_readout_passes_on_what_its_module_promises() -> None:
    from groupattn import ShapeError
    from groupattn.nn import GroupMLP, GroupPooling

    _, trivial, regular = _types(C4, fields=2)
    # lifted → lifted is not a read-out: unverified, with the reason
    not_invariant = GeometricInvariantReadout(GroupMLP(2, 4, "C4"), regular).contract(C4)
    assert not_invariant.kind == Status.UNVERIFIED
    assert "→ invariant" in not_invariant.reason and "promises equivariant" in not_invariant.reason
    # a C4 read-out promises nothing for the reflections of D4
    narrow = GeometricInvariantReadout(OrbitPooledLinear(2, 3, "C4"), regular).contract(D4)
    assert narrow.kind == Status.UNVERIFIED
    with pytest.raises(ShapeError, match="GeometricInvariantReadout: expected a GeometricTensor"):
        GeometricInvariantReadout(OrbitPooledLinear(2, 3, "C4"), regular)(torch.randn(1, 8, 3, 3))
    with pytest.raises(ShapeError, match="expected its module to return"):
        GeometricInvariantReadout(GroupPooling("C4"), regular)(
            enn.GeometricTensor(torch.randn(1, 8, 3, 3), regular)
        )
    from groupattn import ConfigurationError

    with pytest.raises(ConfigurationError, match="regular representation"):
        GeometricInvariantReadout(OrbitPooledLinear(2, 3, "C4"), trivial)
    # attack round 9: a module for another point group of the same order (C4 on D2's
    # regular fields) is refused when built, and promises nothing if swapped in later
    d2 = gspaces.flipRot2dOnR2(2)
    d2_fields = enn.FieldType(d2, [d2.regular_repr] * 2)
    with pytest.raises(ConfigurationError, match="expected a module for the point group D2"):
        GeometricInvariantReadout(OrbitPooledLinear(2, 3, "C4"), d2_fields)
    swapped = GeometricInvariantReadout(OrbitPooledLinear(2, 3, "D2"), d2_fields)
    swapped.module = OrbitPooledLinear(2, 3, "C4")
    assert swapped.contract(CyclicGroup(2)).kind == Status.UNVERIFIED
    # a pooling that does not look at the input type it is asked about (it promises
    # lifted(C4) → invariant): the read-out compares the types itself
    from groupattn.nn import GroupGlobalPool

    swapped.module = GroupGlobalPool("C4")
    other = swapped.contract(CyclicGroup(2))
    assert other.kind == Status.UNVERIFIED and "→ invariant" in (other.reason or "")


def test_geometric_tensor_is_a_pytree_node() -> None:
    _, _, regular = _types(C4)
    g = enn.GeometricTensor(torch.randn(1, regular.size, 3, 3), regular)
    leaves, spec = pytree.tree_flatten(g)
    assert len(leaves) == 1 and leaves[0] is g.tensor
    back = pytree.tree_unflatten(leaves, spec)
    assert back.type == regular and back.tensor is g.tensor


# ---------------------------------------------------------------- the registry model
def test_escnn_is_imported_only_when_needed() -> None:
    code = (
        "import sys, groupattn, groupattn.models, groupattn.interop, groupattn.check\n"
        "assert 'escnn_hybrid' in groupattn.models.list_models()\n"
        "print(sorted(m for m in sys.modules if m == 'escnn' or m.startswith('escnn.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_escnn_the_model_raises_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name == "escnn" or name.startswith("escnn."):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "escnn", None)
    with pytest.raises(MissingExtraError, match=r"groupattn\[escnn\]") as info:
        create("escnn_hybrid")
    assert "\n" not in str(info.value) and info.value.extra == "escnn"


def test_registry_entry() -> None:
    assert "escnn_hybrid" in list_models()
    spec = get_spec("escnn_hybrid")
    assert spec.group == "c4" and spec.input_shape == (1, 20, 20)


def _parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("point_group", ["C4", "D4"])
@pytest.mark.parametrize("dim", [4, 8])
def test_the_baseline_has_about_the_equivariant_models_parameter_count(
    point_group: str, dim: int
) -> None:
    """The default baseline width ``dim·√|H|`` (a multiple of the heads) matches the
    equivariant model's parameters to within 20 %; the same channel count ``dim·|H|``
    would give the baseline several times more."""
    order = 4 if point_group == "C4" else 8
    equivariant = _parameters(create("escnn_hybrid", point_group=point_group, dim=dim))
    baseline = create("escnn_hybrid", point_group=point_group, dim=dim, equivariant=False)
    assert baseline.head.module.dim == round(dim * order**0.5 / 2) * 2
    assert 0.8 <= _parameters(baseline) / equivariant <= 1.25, (
        _parameters(baseline),
        equivariant,
    )
    same_width = create(
        "escnn_hybrid",
        point_group=point_group,
        dim=dim,
        equivariant=False,
        baseline_dim=dim * order,
    )
    assert _parameters(same_width) > 2.5 * equivariant


def test_preset_widths() -> None:
    """The preset: 16 regular C4 fields against the 32-channel baseline."""
    assert _parameters(create("escnn_hybrid")) == 61_604
    baseline = create("escnn_hybrid", equivariant=False)
    assert _parameters(baseline) == 67_870
    assert baseline.head.module.dim == 32


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"baseline_dim": 0}, "expected baseline_dim >= 1, got 0"),
        ({"baseline_dim": 33}, "expected baseline_dim divisible by num_heads=2, got 33"),
        ({"baseline_dim": 32.0}, "expected baseline_dim to be an int, got float"),
        ({"baseline_dim": True}, "expected baseline_dim to be an int, got bool"),
        ({"dim": "8"}, "expected dim to be an int, got str"),
    ],
)
def test_bad_widths_are_refused_by_name(options: dict[str, Any], message: str) -> None:
    from groupattn import ConfigurationError

    with pytest.raises(ConfigurationError, match=f"EscnnHybrid: {message}"):
        create("escnn_hybrid", equivariant=False, **options)


def test_numpy_integers_are_accepted_as_widths() -> None:
    import numpy as np

    baseline = create("escnn_hybrid", equivariant=False, dim=np.int64(4), baseline_dim=np.int32(6))
    assert baseline.head.module.dim == 6
    assert create("escnn_hybrid", dim=np.int64(4)).head.module.dim == 4


def test_baseline_dim_sets_the_baseline_width_only() -> None:
    baseline = create("escnn_hybrid", equivariant=False, baseline_dim=12)
    assert baseline.head.module.dim == 12
    equivariant = create("escnn_hybrid", dim=4, baseline_dim=12)
    assert equivariant.head.module.dim == 4


@pytest.mark.parametrize(("point_group", "name", "order"), [("C4", "c4", 4), ("D4", "d4", 8)])
def test_model_is_certified_and_verified_for_every_element(
    point_group: str, name: str, order: int
) -> None:
    torch.manual_seed(0)
    model = create("escnn_hybrid", point_group=point_group)
    x = torch.randn(2, 1, 20, 20)
    cert = certify(model, x, name, verify=True)
    assert cert.verdict == Status.INVARIANT, cert.to_text()
    assert cert.output_type == InvariantField() and not cert.unverified
    report = cert.verification
    assert report is not None and report.equivariant and report.max_error <= TOL
    group: Any = cert.group
    assert len(list(group.elements())) == order
    full = verify(model, x, group, elements=list(group.elements()))
    assert full.max_error <= TOL, full


def test_d4_model_is_certified_under_c4() -> None:
    model = create("escnn_hybrid", point_group="D4")
    cert = certify(model, torch.randn(2, 1, 12, 12), "c4", verify=True)
    assert cert.verdict == Status.INVARIANT, cert.to_text()


def test_float32_logits_are_invariant_to_rounding() -> None:
    """DESIGN.md's float32 tolerance: relative error ≤ 1e-5 (summation order differs)."""
    torch.manual_seed(0)
    model = create("escnn_hybrid", point_group="D4").eval()
    x = torch.randn(3, 1, 20, 20)
    field = GridField()
    with torch.no_grad():
        y = model(x)
        for g in D4.elements():
            assert relative_error(model(field.act(D4, g, x)), y) <= 1e-5


def test_baseline_is_rejected_with_a_reason() -> None:
    torch.manual_seed(0)
    model = create("escnn_hybrid", equivariant=False)
    cert = certify(model, torch.randn(2, 1, 20, 20), "c4", verify=True)
    assert cert.verdict == Status.BROKEN
    assert cert.first_break is not None
    assert "R2Conv on a C1 gspace" in cert.first_break.reason
    assert cert.verification is not None and cert.verification.max_error > 1e-6


def test_readouts_of_the_model() -> None:
    """``readout="orbit"`` (default) and the per-field group pooling of ``"pool"`` are both
    certified invariant; an unknown read-out is refused by name."""
    from groupattn import ConfigurationError

    torch.manual_seed(0)
    x = torch.randn(2, 1, 12, 12)
    for readout in ("orbit", "pool"):
        model = create("escnn_hybrid", readout=readout, stem_dilations=(1,))
        cert = certify(model, x, "c4", verify=True)
        assert cert.verdict == Status.INVARIANT, (readout, cert.to_text())
        assert model(x[:0]).shape == (0, 10)
    with pytest.raises(ConfigurationError, match="EscnnHybrid: expected readout 'orbit' or 'pool'"):
        create("escnn_hybrid", readout="mean")


def test_model_trains_and_keeps_exact_filters() -> None:
    torch.manual_seed(0)
    model = create("escnn_hybrid", stem_dilations=(1,))
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, labels = torch.randn(4, 1, 12, 12), torch.tensor([0, 1, 2, 3])
    model.train()
    for _ in range(2):
        optimiser.zero_grad()
        nn.functional.cross_entropy(model(x), labels).backward()
        optimiser.step()
    model.eval()
    for conv in model.modules():
        if isinstance(conv, enn.R2Conv):
            assert steerability_error(conv, C4) == 0.0
    cert = certify(model, torch.randn(2, 1, 12, 12), "c4", verify=True)
    assert cert.verdict == Status.INVARIANT, cert.to_text()


def test_finer_and_continuous_gspaces() -> None:
    # C8: certified only under its subgroup C4 (45° rotations do not act on the grid)
    gs = gspaces.rot2dOnR2(8)
    trivial = enn.FieldType(gs, [gs.trivial_repr])
    regular = enn.FieldType(gs, [gs.regular_repr])
    conv = _settle(_conv(trivial, regular, kernel_size=5, padding=2), trivial)
    assert contract_of(conv, CyclicGroup(8)).kind == Status.UNVERIFIED
    assert _numerical_error(conv, C4) <= TOL
    # SO(2): nothing acts on the grid; the helpers leave it alone
    so2 = gspaces.rot2dOnR2(-1, maximum_frequency=2)
    scalar = enn.FieldType(so2, [so2.trivial_repr])
    vector = enn.FieldType(so2, [so2.irrep(1)])
    with escnn_compatibility():
        cont = enn.R2Conv(scalar, vector, 3, padding=1, recompute=True)
    exact_steerable(cont)
    cont.eval()
    refresh_filters(cont)
    contract = contract_of(cont, C4)
    assert contract.kind == Status.UNVERIFIED, contract.describe()
