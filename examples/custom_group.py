"""A custom symmetry: attention over the six vertices of a hexagon.

The hexagon's symmetry group (rotations and reflections, the dihedral group of order
12) is given by two generator permutations of the six vertices — no subclassing, no
editing of the library. Its *orbitals* (orbits on ordered pairs of vertices) are the
four vertex distances 0, 1, 2, 3 around the ring, so a learned attention bias with one
value per orbital and head (``OrbitalBias``) is invariant by construction, and
``OrbitalAttention`` with that bias is equivariant to the whole group. A bias with one
free value per *pair* (``bias="pairwise"``) is not, its contract says so, and the
numerical check shows it.

Run: ``python examples/custom_group.py [--quick]``
"""

from __future__ import annotations

import argparse

import torch

from groupattn.actions import GSet
from groupattn.attention import OrbitalAttention
from groupattn.groups import PermutationGroup
from groupattn.testing import assert_equivariant, equivariance_error

ROTATE = [1, 2, 3, 4, 5, 0]  # vertex i moves to i + 1
REFLECT = [0, 5, 4, 3, 2, 1]  # vertex i moves to −i


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

    # tokens (B, 6, 16) on the vertices; input and output type GSetField(vertices)
    layer = OrbitalAttention(16, 2, vertices, bias_init_std=0.5).double()
    broken = OrbitalAttention(16, 2, vertices, bias="pairwise", bias_init_std=0.5).double()
    print(f"contract: {layer.contract(hexagon).describe()}")
    x = torch.randn(2 if args.quick else 8, 6, 16, dtype=torch.float64)
    # every one of the 12 elements, in float64: tolerance 1e-10 (DESIGN.md)
    report = assert_equivariant(layer, x, hexagon)
    print(
        f"orbital bias:  max error over all {len(report.errors)} elements = {report.max_error:.1e}"
    )
    bad = equivariance_error(broken, x, hexagon)
    print(
        f"per-pair bias: max error = {bad.max_error:.1e} "
        f"(worst element {bad.worst_element!r}); its contract says: {broken.contract(hexagon).reason}"
    )
    assert bad.max_error > 1e-3
    return {"orbital": report.max_error, "per_pair": bad.max_error}


if __name__ == "__main__":
    main()
