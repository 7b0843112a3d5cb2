"""Intertwiner bases: dimension = character inner product, constraint holds on every element.

For C4, D4, S3 (a permutation group) and C4×C2 (a direct product), and every pair of
representations among trivial, regular, a G-set's permutation representation, a direct
sum, a 2-D orthogonal representation and a sign representation, the basis returned by
``intertwiner_basis`` has ``(1/|G|) Σ_g χ_in(g) χ_out(g)`` elements, is orthonormal
under the Frobenius inner product and satisfies ``ρ_out(g) W = W ρ_in(g)`` for every
element ``g`` (not only the generators) to 1e-10.
"""

from __future__ import annotations

import itertools
import math
from functools import cache
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from groupattn.actions import (
    INTERTWINER_BUDGET,
    DirectSumRepresentation,
    GSet,
    MatrixRepresentation,
    PermutationRepresentation,
    RegularRepresentation,
    Representation,
    TrivialRepresentation,
    clear_intertwiner_cache,
    intertwiner_basis,
    intertwiner_cache_info,
)
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    DirectProduct,
    FiniteGroup,
    GroupElement,
    GroupError,
    PermutationGroup,
    SymmetricGroup,
    p4,
    real_matrix,
)

TOL = 1e-10


def _rotation(quarter_turns: int) -> torch.Tensor:
    return torch.tensor(real_matrix(CyclicGroup(4), quarter_turns % 4), dtype=torch.float64)


def _parity(perm: tuple[int, ...]) -> int:
    sign, seen = 1, [False] * len(perm)
    for start in range(len(perm)):
        length, i = 0, start
        while not seen[i]:
            seen[i] = True
            i = perm[i]
            length += 1
        if length and length % 2 == 0:
            sign = -sign
    return sign


def _standard_s3(perm: tuple[int, ...]) -> torch.Tensor:
    """The 2-D irreducible of S3: the permutation matrix on the sum-zero plane."""
    q = torch.tensor([[1.0, -1.0, 0.0], [1.0, 1.0, -2.0]], dtype=torch.float64).T
    q = q / q.norm(dim=0, keepdim=True)  # (3, 2) orthonormal basis of the sum-zero plane
    p = torch.zeros(3, 3, dtype=torch.float64)
    p[list(perm), list(range(3))] = 1
    return q.T @ p @ q


def _reps(key: str) -> tuple[FiniteGroup, dict[str, Representation]]:
    """A group and its six representations: trivial, regular, permutation, sum, 2-D, sign."""
    if key == "C4":
        group: Any = CyclicGroup(4)
        gset = GSet(
            group, 4, lambda g: [(i + g.value) % 4 for i in range(4)], name="C4 on a square"
        )
        two = MatrixRepresentation(group, 2, lambda g: _rotation(g.value), name="rotation")
        sign = MatrixRepresentation(group, 1, lambda g: [[(-1.0) ** g.value]], name="sign")
    elif key == "D4":
        group = DihedralGroup(4)

        def square(g: GroupElement) -> list[int]:
            r, m = g.value % 4, g.value // 4
            return [((-i if m else i) + r) % 4 for i in range(4)]

        gset = GSet(group, 4, square, name="D4 on a square")
        two = MatrixRepresentation(group, 2, lambda g: real_matrix(group, g), name="standard")
        sign = MatrixRepresentation(
            group, 1, lambda g: [[-1.0 if group.is_reflection(g) else 1.0]], name="det"
        )
    elif key == "S3":
        group = PermutationGroup([[1, 0, 2], [1, 2, 0]], name="S3")
        gset = GSet.natural(group)
        two = MatrixRepresentation(group, 2, lambda g: _standard_s3(g.value), name="standard")
        sign = MatrixRepresentation(group, 1, lambda g: [[float(_parity(g.value))]], name="parity")
    else:
        group = DirectProduct(CyclicGroup(4), CyclicGroup(2))
        gset = GSet(
            group,
            6,
            lambda g: (
                [(i + g.value[0]) % 4 for i in range(4)]
                + [4 + (i + g.value[1]) % 2 for i in range(2)]
            ),
            name="C4xC2 on 4+2 points",
        )
        two = MatrixRepresentation(group, 2, lambda g: _rotation(g.value[0]), name="rotation")
        sign = MatrixRepresentation(group, 1, lambda g: [[(-1.0) ** g.value[1]]], name="sign")
    perm = PermutationRepresentation(gset)
    reps = {
        "trivial": TrivialRepresentation(1),
        "regular": RegularRepresentation(group),
        "permutation": perm,
        "sum": DirectSumRepresentation([sign, TrivialRepresentation(1), two]),
        "two": two,
        "sign": sign,
    }
    return group, reps


@cache
def _cached_reps(key: str) -> tuple[FiniteGroup, dict[str, Representation]]:
    return _reps(key)


GROUPS = ["C4", "D4", "S3", "C4xC2"]
NAMES = ["trivial", "regular", "permutation", "sum", "two", "sign"]


def _character(rep: Representation, group: FiniteGroup) -> list[float]:
    return [float(torch.trace(rep.matrix_for(group, g))) for g in group.elements()]


@pytest.mark.parametrize("key", GROUPS)
def test_dimension_and_constraint_for_every_pair(key: str) -> None:
    group, reps = _reps(key)
    order = group.order()
    elements = group.elements()
    matrices = {name: [rep.matrix_for(group, g) for g in elements] for name, rep in reps.items()}
    characters = {name: [float(torch.trace(m)) for m in ms] for name, ms in matrices.items()}
    for name_in, name_out in itertools.product(NAMES, repeat=2):
        rep_in, rep_out = reps[name_in], reps[name_out]
        basis = intertwiner_basis(rep_in, rep_out, group)
        assert basis.dtype == torch.float64
        inner = sum(a * b for a, b in zip(characters[name_in], characters[name_out])) / order
        assert abs(inner - round(inner)) < 1e-9
        assert basis.shape == (round(inner), rep_out.dim, rep_in.dim), (key, name_in, name_out)
        flat = basis.reshape(basis.shape[0], rep_out.dim * rep_in.dim)
        gram = flat @ flat.T
        assert torch.allclose(
            gram, torch.eye(basis.shape[0], dtype=torch.float64), atol=TOL, rtol=0
        )
        for m_in, m_out in zip(matrices[name_in], matrices[name_out]):
            residual = m_out @ basis - basis @ m_in
            assert residual.numel() == 0 or float(residual.abs().max()) <= TOL, (
                key,
                name_in,
                name_out,
            )


def test_representations_are_homomorphisms() -> None:
    """Sanity of the test's own representations (and of PermutationRepresentation, DirectSum)."""
    for key in GROUPS:
        group, reps = _cached_reps(key)
        for rep in reps.values():
            for g, h in itertools.product(group.elements(), repeat=2):
                lhs = rep.matrix_for(group, g * h)
                assert torch.allclose(
                    lhs, rep.matrix_for(group, g) @ rep.matrix_for(group, h), atol=1e-12
                )


@pytest.mark.parametrize("key", GROUPS)
@given(data=st.data())
def test_random_combinations_are_equivariant_maps(key: str, data: st.DataObject) -> None:
    group, reps = _cached_reps(key)
    name_in, name_out = data.draw(st.sampled_from(NAMES)), data.draw(st.sampled_from(NAMES))
    rep_in, rep_out = reps[name_in], reps[name_out]
    basis = intertwiner_basis(rep_in, rep_out, group)
    seed = data.draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    coeffs = torch.randn(basis.shape[0], generator=gen, dtype=torch.float64)
    w = torch.einsum("k,kij->ij", coeffs, basis)
    x = torch.randn(3, rep_in.dim, generator=gen, dtype=torch.float64)
    g = group.sample(1, seed=seed)[0]
    # W (ρ_in(g) x) == ρ_out(g) (W x), with the channel action of the representations
    lhs = rep_in.apply(group, g, x, axis=1) @ w.T
    rhs = rep_out.apply(group, g, x @ w.T, axis=1)
    assert torch.allclose(lhs, rhs, atol=1e-10, rtol=0)


def test_permutation_representations_get_exact_orbital_bases() -> None:
    group, reps = _cached_reps("D4")
    basis = intertwiner_basis(reps["permutation"], reps["permutation"], group)
    assert basis.shape == (
        3,
        4,
        4,
    )  # D4 on a square's vertices: 3 orbitals (same, adjacent, opposite)
    support = (basis != 0).to(torch.int64)
    assert torch.equal(
        support.sum(0), torch.ones(4, 4, dtype=torch.int64)
    )  # a partition of the pairs
    for b in basis:
        values = b[b != 0]
        assert torch.equal(values, torch.full_like(values, values[0]))  # constant on its orbital


def test_restriction_to_the_point_group() -> None:
    """p4 acts on a C4 representation through its rotation part."""
    c4 = CyclicGroup(4)
    two = MatrixRepresentation(c4, 2, lambda g: _rotation(g.value), name="rotation")
    regular = RegularRepresentation(c4)
    on_c4 = intertwiner_basis(regular, two, c4)
    on_p4 = intertwiner_basis(regular, two, p4(4))
    assert on_c4.shape == on_p4.shape == (2, 2, 4)
    # same space: projecting one basis onto the other loses nothing
    a, b = on_c4.reshape(2, -1), on_p4.reshape(2, -1)
    assert torch.allclose((a @ b.T) @ b, a, atol=1e-10)


def test_cache_returns_copies_and_skips_the_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    import groupattn.actions._intertwiners as module

    clear_intertwiner_cache()
    group, reps = _reps("C4")
    first = intertwiner_basis(reps["regular"], reps["two"], group)
    assert intertwiner_cache_info() == (0, 1, 1)

    def fail(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise AssertionError("solved again")

    monkeypatch.setattr(module, "_null_space_basis", fail)
    again = intertwiner_basis(reps["regular"], reps["two"], group)
    assert torch.equal(first, again) and intertwiner_cache_info().hits == 1
    again.zero_()  # the caller's copy
    assert torch.equal(intertwiner_basis(reps["regular"], reps["two"], group), first)
    # an equal key from a freshly built regular representation hits too
    intertwiner_basis(RegularRepresentation(CyclicGroup(4)), reps["two"], CyclicGroup(4))
    assert intertwiner_cache_info().hits == 3


def test_direct_sum_and_permutation_representation_actions() -> None:
    group, reps = _cached_reps("S3")
    total = reps["sum"]
    assert isinstance(total, DirectSumRepresentation) and total.dim == 4
    x = torch.randn(2, total.dim, 5, dtype=torch.float64)
    for g in group.elements():
        expected = torch.einsum("ij,bjk->bik", total.matrix_for(group, g), x)
        assert torch.allclose(total.apply(group, g, x, axis=1), expected, atol=1e-12)
        perm_rep = reps["permutation"]
        moved = perm_rep.apply(group, g, x[:, :3], axis=1)
        assert torch.equal(
            moved, torch.einsum("ij,bjk->bik", perm_rep.matrix_for(group, g), x[:, :3])
        )
    assert reps["permutation"].is_permutation and not total.is_permutation


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: intertwiner_basis("trivial", TrivialRepresentation(1), CyclicGroup(2)),
            "expected rep_in as a Representation, got 'trivial'",
        ),
        (
            lambda: intertwiner_basis(TrivialRepresentation(1), TrivialRepresentation(1), "C2"),
            "expected a Group, got 'C2'",
        ),
        (
            lambda: intertwiner_basis(
                TrivialRepresentation(1), TrivialRepresentation(1), CyclicGroup(2), tol=2.0
            ),
            "tolerance",
        ),
        (
            lambda: RegularRepresentation(CyclicGroup),
            "RegularRepresentation: expected a finite group, got the class CyclicGroup",
        ),
        (lambda: MatrixRepresentation("C4", 2, lambda g: g), "expected a Group, got 'C4'"),
        (lambda: DirectSumRepresentation([]), "expected a non-empty list"),
        (
            lambda: DirectSumRepresentation([TrivialRepresentation(1), 3]),
            "expected representations, got 3",
        ),
        (
            lambda: DirectSumRepresentation(
                [RegularRepresentation(CyclicGroup(2)), RegularRepresentation(CyclicGroup(3))]
            ),
            "one group",
        ),
        (
            lambda: PermutationRepresentation(CyclicGroup(4)),
            "PermutationRepresentation: expected a GSet, got the group C4",
        ),
        (lambda: TrivialRepresentation(0), "expected dim as an int >= 1"),
    ],
)
def test_bad_input(make: Any, message: str) -> None:
    with pytest.raises(GroupError, match=message):
        make()


def test_budget_is_refused_before_solving() -> None:
    s5 = SymmetricGroup(5)
    regular = RegularRepresentation(s5)  # 120 x 120 > budget
    assert regular.dim**2 > INTERTWINER_BUDGET
    with pytest.raises(
        GroupError, match=rf"INTERTWINER_BUDGET={INTERTWINER_BUDGET}, got 120·120 = 14400"
    ):
        intertwiner_basis(regular, regular, s5)
    assert math.isclose(
        intertwiner_basis(regular, TrivialRepresentation(1), s5).sum().item() ** 2, 120.0
    )
