"""Values that carry a representation: attention weights from invariants, values by intertwiners.

On a hexagonal grid (7 cells) the features of a cell need not be invariant: a cell can
hold one value per *orientation* (the regular representation of C6: rotating the grid
also cycles the 6 orientation channels) or one value per *neighbour direction* (the
permutation representation of D6 on the 6 directions). The tokens then move twice:
cells are permuted (the G-set) and each token's channels are permuted by ``ρ(g)``
(``GSetField(cells, channels=ρ)``).

``OrbitalAttention(..., channels=ρ)`` stays equivariant by construction:

* attention weights come from **invariant** features only (the projections of each
  token onto the trivial representation — including any invariant channels of a
  direct sum ``trivial ⊕ ρ`` — and its norm) plus the orbital bias, so they do not
  change when the input moves;
* values and the output map are **intertwiners** — linear maps ``W`` with
  ``W ρ(g) = ρ(g) W``, learned as combinations of the fixed basis
  ``intertwiner_basis(ρ, ρ, G)`` (for permutation representations: the indicator
  matrices of the orbits of G on channel pairs).

An ordinary layer that mixes the channels freely (``channels=None``: a plain linear
map) is not equivariant under the same field type, and the check shows it.

Run: ``python examples/value_stream.py [--quick]``
"""

from __future__ import annotations

import argparse

import torch

from groupattn.actions import (
    DirectSumRepresentation,
    GSet,
    GSetField,
    PermutationRepresentation,
    RegularRepresentation,
    Representation,
    TrivialRepresentation,
)
from groupattn.attention import OrbitalAttention
from groupattn.groups import GroupElement, PermutationGroup
from groupattn.testing import assert_equivariant, equivariance_error

CELLS = sorted((q, r, -q - r) for q in (-1, 0, 1) for r in (-1, 0, 1) if abs(q + r) <= 1)  # 7 cells
INDEX = {c: i for i, c in enumerate(CELLS)}
ROTATE = [INDEX[(-r, -s, -q)] for q, r, s in CELLS]  # 60° rotation of the cells
REFLECT = [INDEX[(q, s, r)] for q, r, s in CELLS]
RING = [
    i for i, c in enumerate(CELLS) if c != (0, 0, 0)
]  # the 6 neighbours of the centre = 6 directions


def direction_representation(group: PermutationGroup) -> PermutationRepresentation:
    """The permutation representation of ``group`` on the 6 neighbour directions.

    The directions are the 6 cells around the centre, so where a direction goes is read
    off the permutation of the cells: a G-set of 6 points, and its permutation
    representation (channel ``k`` moves to channel ``perm[k]``).
    """

    def directions(g: GroupElement) -> list[int]:
        cells = group.permutation(g)
        return [RING.index(cells[cell]) for cell in RING]

    return PermutationRepresentation(GSet(group, 6, directions, name=f"{group.name} on directions"))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller batch")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    c6 = PermutationGroup([ROTATE], name="C6")
    d6 = PermutationGroup([ROTATE, REFLECT], name="D6")
    # 4 invariant scalars and 2 values per orientation; or one value per direction
    orientations = DirectSumRepresentation(
        [TrivialRepresentation(4), RegularRepresentation(c6, multiplicity=2)]
    )
    cases: dict[str, tuple[PermutationGroup, Representation]] = {
        "C6 orientations": (c6, orientations),
        "D6 directions": (d6, direction_representation(d6)),
    }
    errors: dict[str, float] = {}
    for name, (group, rep) in cases.items():
        cells = GSet.natural(group)
        field = GSetField(cells, channels=rep)
        layer = OrbitalAttention(rep.dim, 2, cells, channels=rep, bias_init_std=1.0).double()
        plain = OrbitalAttention(rep.dim, 2, cells, bias_init_std=1.0).double()
        x = torch.randn(2 if args.quick else 4, cells.num_points, rep.dim, dtype=torch.float64)
        report = assert_equivariant(layer, x, group)  # every element, tokens and channels moved
        bad = equivariance_error(plain, x, group, input_type=field, output_type=field)
        errors[name] = report.max_error
        errors[f"{name} plain"] = bad.max_error
        print(
            f"\n== {name}: {rep!r} on each of {cells.num_points} cells; {layer.contract(group).describe()}"
        )
        print(
            f"invariant features per token: {layer.invariant_basis.shape[0]} (+ norm: {layer.use_norm}); "
            f"intertwiner basis of the values: {layer.value_basis.shape[0]} maps"
        )
        print(
            f"equivariant values: max error over all {len(report.errors)} elements = {report.max_error:.1e}"
        )
        print(f"plain linear values: max error = {bad.max_error:.1e}")
    return errors


if __name__ == "__main__":
    main()
