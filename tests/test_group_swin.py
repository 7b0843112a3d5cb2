"""``group_swin``: C4/D4-equivariant Swin (group window attention, group patch merging) and its baseline."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn import ConfigurationError, ShapeError
from groupattn.actions import GridField, LiftedField
from groupattn.attention import GroupWindowAttention, window_orbitals
from groupattn.check import Status, certify
from groupattn.contracts import contract_of
from groupattn.groups import CyclicGroup, DihedralGroup, RotoTranslationGroup, TorusTranslations
from groupattn.models import GroupSwin, create
from groupattn.nn import GroupPatchMerging, GroupWindowBlock, LiftedUpsample

GROUPS = {
    "C4": CyclicGroup(4),
    "D4": DihedralGroup(4),
    "C2": CyclicGroup(2),
    "D1": DihedralGroup(1),
}


def _every_element(layer: torch.nn.Module, point, x: torch.Tensor, tol: float = 1e-12) -> None:
    field = LiftedField(point)
    y = layer(x)
    for h in point.elements():
        torch.testing.assert_close(
            layer(field.act(point, h, x)), field.act(point, h, y), rtol=tol, atol=tol
        )


# ----------------------------------------------------------------------------- orbitals
@pytest.mark.parametrize("name", ["C1", "C4", "D4"])
@pytest.mark.parametrize("window", [2, 3, 4])
def test_window_orbitals_are_constant_on_orbits_and_count_them(name: str, window: int) -> None:
    point = CyclicGroup(1) if name == "C1" else GROUPS[name]
    index, count = window_orbitals(point, window)
    g, n = point.order(), window * window
    assert index.shape == (g * n, g * n)
    assert count == g * n * n and int(index.unique().numel()) == count  # |H| pairs per orbital
    # the permutation of the window's tokens by each element, read off the field action
    field = LiftedField(point)
    probe = torch.arange(g * n, dtype=torch.float64).reshape(1, 1, g, window, window)
    for h in point.elements():
        perm = field.act(point, h, probe).reshape(-1).long()  # new token t was token perm[t]
        assert torch.equal(index[perm][:, perm], index)


# ----------------------------------------------------------------------------- layers
@pytest.mark.parametrize("name", sorted(GROUPS))
@settings(max_examples=10, deadline=None)
@given(
    windows=st.integers(1, 3),
    window=st.sampled_from([2, 4]),
    shifted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_window_attention_equivariant_for_every_element(
    name: str, windows: int, window: int, shifted: bool, seed: int
) -> None:
    point = GROUPS[name]
    torch.manual_seed(seed)
    layer = GroupWindowAttention(
        4, point, num_heads=2, window_size=window, shift=window // 2 * shifted
    )
    layer = layer.double()
    side = windows * window
    x = torch.randn(2, 4, point.order(), side, side, dtype=torch.float64)
    _every_element(layer, point, x)


@pytest.mark.parametrize("shift", [0, 2])
def test_window_attention_translations_by_window_multiples(shift: int) -> None:
    torch.manual_seed(0)
    point = CyclicGroup(4)
    layer = GroupWindowAttention(4, point, num_heads=1, window_size=4, shift=shift).double()
    x = torch.randn(1, 4, 4, 8, 8, dtype=torch.float64)
    moved = torch.roll(x, (4, -4), (3, 4))
    torch.testing.assert_close(layer(moved), torch.roll(layer(x), (4, -4), (3, 4)))
    assert contract_of(layer, TorusTranslations(2, 2, stride=4)).kind == Status.EQUIVARIANT
    assert contract_of(layer, TorusTranslations(8, 8)).kind == Status.BROKEN
    assert contract_of(layer, RotoTranslationGroup(point, 8)).kind == Status.BROKEN


def test_window_attention_attends_within_windows_only() -> None:
    torch.manual_seed(0)
    layer = GroupWindowAttention(4, "C4", num_heads=2, window_size=2).double()
    x = torch.randn(1, 4, 4, 4, 4, dtype=torch.float64)
    y = layer(x)
    x2 = x.clone()
    x2[..., 2:, 2:] += 1.0  # another window
    torch.testing.assert_close(layer(x2)[..., :2, :2], y[..., :2, :2])


def test_trivial_group_window_bias_breaks_rotations() -> None:
    torch.manual_seed(0)
    layer = GroupWindowAttention(4, "C1", num_heads=2, window_size=4).double()
    x = torch.randn(1, 4, 1, 8, 8, dtype=torch.float64)
    rotated = torch.rot90(x, 1, (3, 4))
    assert (layer(rotated) - torch.rot90(layer(x), 1, (3, 4))).abs().max() > 1e-3
    contract = contract_of(layer, CyclicGroup(4))
    assert contract.kind == Status.BROKEN and "C1" in (contract.reason or "")


def test_window_attention_errors_name_the_module() -> None:
    with pytest.raises(ConfigurationError, match="GroupWindowAttention"):
        GroupWindowAttention(4, "C4", window_size=4, shift=1)
    with pytest.raises(ConfigurationError, match="GroupWindowAttention"):
        GroupWindowAttention(5, "C4", num_heads=2)
    layer = GroupWindowAttention(4, "C4", window_size=4)
    with pytest.raises(ShapeError, match="GroupWindowAttention"):
        layer(torch.randn(1, 4, 4, 6, 6))
    with pytest.raises(ShapeError, match="GroupWindowAttention"):
        layer(torch.randn(1, 4, 2, 8, 8))


@pytest.mark.parametrize("mix", [False, True])
@pytest.mark.parametrize("name", ["C4", "D4"])
def test_window_block_equivariant(name: str, mix: bool) -> None:
    point = GROUPS[name]
    torch.manual_seed(1)
    block = GroupWindowBlock(
        4, point, num_heads=2, window_size=2, shift=1, mix_orientations=mix
    ).double()
    assert block.mlp.mix_orientations == mix
    _every_element(block, point, torch.randn(2, 4, point.order(), 6, 6, dtype=torch.float64))
    assert contract_of(block, point).kind == Status.EQUIVARIANT


@pytest.mark.parametrize("name", sorted(GROUPS))
@settings(max_examples=8, deadline=None)
@given(cells=st.integers(1, 4), stride=st.sampled_from([2, 3]), seed=st.integers(0, 2**16))
def test_patch_merging_equivariant_for_every_element(
    name: str, cells: int, stride: int, seed: int
) -> None:
    point = GROUPS[name]
    torch.manual_seed(seed)
    merge = GroupPatchMerging(3, 5, point, stride=stride).double()
    side = cells * stride
    x = torch.randn(2, 3, point.order(), side, side, dtype=torch.float64)
    assert merge(x).shape == (2, 5, point.order(), cells, cells)
    _every_element(merge, point, x)
    # a translation by the stride moves the output by one cell
    moved = torch.roll(x, stride, 3)
    torch.testing.assert_close(merge(moved), torch.roll(merge(x), 1, 3))


def test_patch_merging_c1_is_swin_merging() -> None:
    """C1: concatenate each 2 × 2 cell (after the norm) and apply one linear map."""
    torch.manual_seed(0)
    merge = GroupPatchMerging(3, 6, "C1").double()
    x = torch.randn(2, 3, 1, 4, 4, dtype=torch.float64)
    normed = merge.norm(x)[:, :, 0]  # (B, C, 4, 4)
    cells = normed.reshape(2, 3, 2, 2, 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(2, 2, 2, 12)
    expected = cells @ merge.weight[:, :, 0].reshape(6, 12).T
    torch.testing.assert_close(merge(x)[:, :, 0], expected.permute(0, 3, 1, 2))


def test_patch_merging_contract_and_errors() -> None:
    point = CyclicGroup(4)
    merge = GroupPatchMerging(3, 6, point)
    assert contract_of(merge, point).kind == Status.EQUIVARIANT
    assert contract_of(merge, DihedralGroup(4)).kind == Status.BROKEN
    out = contract_of(merge, TorusTranslations(4, 4, stride=2))
    assert out.kind == Status.EQUIVARIANT and out.output_group == TorusTranslations(4, 4)
    assert contract_of(merge, TorusTranslations(8, 8)).kind == Status.BROKEN
    with pytest.raises(ShapeError, match="GroupPatchMerging"):
        merge(torch.randn(1, 3, 4, 5, 5))
    with pytest.raises(ConfigurationError, match="GroupPatchMerging"):
        GroupPatchMerging(0, 6, point)


@pytest.mark.parametrize("name", sorted(GROUPS))
@pytest.mark.parametrize("scale", [1, 2, 3])
def test_upsample_equivariant_and_inverts_merging_grid(name: str, scale: int) -> None:
    point = GROUPS[name]
    torch.manual_seed(0)
    up = LiftedUpsample(point, scale)
    x = torch.randn(2, 3, point.order(), 3, 3, dtype=torch.float64)
    y = up(x)
    assert y.shape == (2, 3, point.order(), 3 * scale, 3 * scale)
    _every_element(up, point, x, tol=0.0)
    torch.testing.assert_close(y[..., ::scale, ::scale], x, rtol=0, atol=0)
    torch.testing.assert_close(up(torch.roll(x, 1, 4)), torch.roll(y, scale, 4), rtol=0, atol=0)
    out = contract_of(up, TorusTranslations(3, 3))
    assert out.kind == Status.EQUIVARIANT
    assert out.output_group == TorusTranslations(3, 3, stride=scale)
    assert contract_of(up, point).kind == Status.EQUIVARIANT


def test_upsample_errors_name_the_module() -> None:
    with pytest.raises(ConfigurationError, match="LiftedUpsample"):
        LiftedUpsample("C4", 0)
    with pytest.raises(ShapeError, match="LiftedUpsample"):
        LiftedUpsample("C4")(torch.randn(1, 3, 2, 4, 4))


# ----------------------------------------------------------------------------- model
def _image_elements(point, model: torch.nn.Module, x: torch.Tensor) -> float:
    """Largest relative change of the logits over every element of ``point`` (about the centre)."""
    y = model(x).double()
    worst = 0.0
    for h in point.elements():
        moved = GridField().act(point, h, x.double()).to(x.dtype)
        worst = max(worst, float((model(moved).double() - y).abs().max() / y.abs().max()))
    return worst


@pytest.mark.parametrize("name", ["C4", "D4"])
def test_logits_invariant_float64(name: str) -> None:
    torch.manual_seed(0)
    model = create("group_swin", point_group=name).eval().double()
    x = torch.rand(3, 1, 32, 32, dtype=torch.float64)
    assert _image_elements(GROUPS[name], model, x) < 1e-12


@pytest.mark.parametrize("name", ["C4", "D4"])
def test_logits_invariant_float32_and_bfloat16(name: str) -> None:
    """float32: ≤ 1e-5 relative (measured ~6e-7); bfloat16: within a few bf16 ulps
    (measured ≤ 5e-3 relative, bf16's epsilon is 2⁻⁷ ≈ 7.8e-3)."""
    torch.manual_seed(0)
    x = torch.rand(3, 1, 32, 32)
    model = create("group_swin", point_group=name).eval()
    assert _image_elements(GROUPS[name], model, x) < 1e-5
    model = model.to(torch.bfloat16)
    assert _image_elements(GROUPS[name], model, x.to(torch.bfloat16)) < 2**-5


def test_baseline_breaks_numerically_and_by_the_checker() -> None:
    torch.manual_seed(0)
    baseline = create("group_swin", equivariant=False).eval().double()
    assert isinstance(baseline, GroupSwin) and baseline.point_group.order() == 1
    x = torch.rand(2, 1, 32, 32, dtype=torch.float64)
    assert _image_elements(CyclicGroup(4), baseline, x) > 1e-3
    cert = certify(baseline, x[:1].float().double(), "c4")
    assert cert.verdict == Status.BROKEN
    contract = contract_of(baseline, CyclicGroup(4))
    assert contract.kind == Status.BROKEN and "plain Swin baseline" in (contract.reason or "")


def test_certified_invariant_through_the_body() -> None:
    torch.manual_seed(0)
    x = torch.rand(1, 1, 32, 32)
    cert = certify(create("group_swin"), x, "c4", verify=True)
    assert cert.verdict == Status.INVARIANT, str(cert)[:2000]
    cert = certify(create("group_swin", point_group="D4"), x, "d4", verify=True)
    assert cert.verdict == Status.INVARIANT, str(cert)[:2000]


def test_window_mlps_mix_orientations_by_default_and_the_baseline_cannot() -> None:
    """The preset's window blocks read every slice of the group axis (1 × 1 group
    convolutions); ``mix_orientations=False`` gives the shared pointwise MLPs, and the
    baseline's trivial group has one slice to mix (plain ``nn.Linear``)."""
    from groupattn.nn import GroupConvolution

    def mlps(model: torch.nn.Module) -> list:
        return [m.mlp for m in model.modules() if isinstance(m, GroupWindowBlock)]

    assert all(isinstance(m.fc1, GroupConvolution) for m in mlps(create("group_swin")))
    assert all(isinstance(m.fc1, torch.nn.Linear) for m in mlps(GroupSwin(mix_orientations=False)))
    assert all(
        isinstance(m.fc1, torch.nn.Linear) for m in mlps(create("group_swin", equivariant=False))
    )
    p4 = create("p4_swin")
    assert all(isinstance(m.fc1, GroupConvolution) for m in mlps(p4))
    assert all(
        isinstance(m.fc1, torch.nn.Linear) for m in mlps(create("p4_swin", mix_orientations=False))
    )


def test_model_contract_and_configuration_errors() -> None:
    model = GroupSwin()
    assert contract_of(model, CyclicGroup(4)).kind == Status.INVARIANT
    assert contract_of(GroupSwin(point_group="D4"), DihedralGroup(4)).kind == Status.INVARIANT
    with pytest.raises(ConfigurationError, match="GroupSwin"):
        GroupSwin(image_size=32, patch_size=4, window_size=8, depths=(2, 2))
    with pytest.raises(ConfigurationError, match="GroupSwin"):
        GroupSwin(window_size=3)
    with pytest.raises(ConfigurationError, match="GroupSwin"):
        GroupSwin(depths=())
    for bad in ("False", 1, None):
        with pytest.raises(
            ConfigurationError, match="GroupSwin: expected mix_orientations True or False"
        ):
            GroupSwin(mix_orientations=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="expected mix_orientations True or False"):
            create("p4_swin", mix_orientations=bad)
    assert GroupSwin(patch_size=4, depths=(2, 2), window_size=4)(
        torch.rand(2, 1, 32, 32)
    ).shape == (
        2,
        10,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shift": False, "absolute_position": False},
        {"mix_orientations": False},
        {"patch_size": 4, "depths": (1, 1, 1), "window_size": 2, "num_heads": 1},
    ],
)
def test_variants_invariant_float64(kwargs: dict) -> None:
    torch.manual_seed(0)
    model = GroupSwin(point_group="D4", **kwargs).eval().double()
    x = torch.rand(2, 1, 32, 32, dtype=torch.float64)
    assert _image_elements(GROUPS["D4"], model, x) < 1e-12
