"""A custom symmetry: attention over the six vertices of a hexagon.

The hexagon's symmetry group (rotations and reflections, the dihedral group of order
12) is given by two generator permutations of the six vertices — no subclassing, no
editing of the library. Its *orbitals* (orbits on ordered pairs of vertices) are the
four vertex distances 0, 1, 2, 3 around the ring, so a learned attention bias with one
value per orbital and head is invariant by construction, and attention with that bias
is equivariant to the whole group. A bias with one free value per *pair* is not, and
the numerical check shows it.

Run: ``python examples/custom_group.py [--quick]``
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from einops import rearrange
from torch import nn

from groupattn.actions import GSet, SetField
from groupattn.attention import attend
from groupattn.contracts import Contract
from groupattn.groups import Group, PermutationGroup
from groupattn.testing import assert_equivariant, equivariance_error

ROTATE = [1, 2, 3, 4, 5, 0]  # vertex i moves to i + 1
REFLECT = [0, 5, 4, 3, 2, 1]  # vertex i moves to −i


class OrbitalAttention(nn.Module):
    """Multi-head self-attention over the points of a G-set, with a bias per orbital.

    Shapes: ``(B, n, dim) → (B, n, dim)``. Contract: *equivariant* from
    ``SetField(n)`` to ``SetField(n)`` under the G-set's group (attention is
    permutation-equivariant; the bias is a function of the orbital only), or — with
    ``per_pair=True`` — *breaks* (a free bias per pair is not constant on orbitals).
    """

    def __init__(self, gset: GSet, dim: int = 16, heads: int = 2, per_pair: bool = False) -> None:
        super().__init__()
        self.gset, self.heads, self.per_pair = gset, heads, per_pair
        orbitals = gset.orbitals()  # (n, n) orbital label of every ordered pair
        self.register_buffer("orbitals", orbitals, persistent=False)
        n = gset.num_points
        rows = n * n if per_pair else gset.num_orbitals()
        self.table = nn.Parameter(0.5 * torch.randn(heads, rows))
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        if per_pair:
            self.register_buffer("pairs", torch.arange(n * n).reshape(n, n), persistent=False)

    def bias(self) -> torch.Tensor:
        """The pairwise bias ``(heads, n, n)``: gathered from the table once per call."""
        index = self.pairs if self.per_pair else self.orbitals
        return self.table[:, index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = rearrange(self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=self.heads)
        y = attend(q, k, v, self.bias().unsqueeze(0), module="OrbitalAttention")
        return self.out(rearrange(y, "b h n d -> b n (h d)"))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        field = SetField(self.gset.num_points)
        if self.per_pair:
            return Contract.breaks("a free bias per pair of vertices is not constant on the orbitals", field, field)
        return Contract.equivariant(field, field)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer random inputs")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    hexagon = PermutationGroup([ROTATE, REFLECT], name="hexagon")
    vertices = GSet.natural(hexagon)
    print(f"{hexagon.name}: order {hexagon.order()}, acting on {vertices.num_points} vertices")
    print(f"orbitals ({vertices.num_orbitals()}), i.e. the distance around the ring:")
    print(vertices.orbitals())

    layer = OrbitalAttention(vertices).double()
    broken = OrbitalAttention(vertices, per_pair=True).double()
    x = torch.randn(2 if args.quick else 8, 6, 16, dtype=torch.float64)
    # every one of the 12 elements, in float64: tolerance 1e-10 (DESIGN.md)
    report = assert_equivariant(layer, x, hexagon)
    print(f"orbital bias:  max error over all {len(report.errors)} elements = {report.max_error:.1e}")
    bad = equivariance_error(broken, x, hexagon)
    print(
        f"per-pair bias: max error = {bad.max_error:.1e} "
        f"(worst element {bad.worst_element!r}); its contract says: {broken.contract(hexagon).reason}"
    )
    assert bad.max_error > 1e-3
    return {"orbital": report.max_error, "per_pair": bad.max_error}


if __name__ == "__main__":
    main()
