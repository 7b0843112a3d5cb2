"""Attention on a hexagonal grid: the 7 and 19 cells of a hexagon under C6 and D6.

Cells are the hexagon's cells of radius 1 (7 cells) and 2 (19 cells) in cube
coordinates ``(q, r, s)`` with ``q + r + s = 0``. The rotation by 60° is
``(q, r, s) ↦ (−r, −s, −q)`` and a reflection is ``(q, r, s) ↦ (q, s, r)``: each is a
permutation of the cells, so C6 (the rotation) and D6 (rotation and reflection) are
``PermutationGroup``s built from generator permutations — no hexagonal-grid code in
the library. Their orbitals on pairs of cells give invariant attention biases;
``OrbitalAttention`` with them is equivariant to every element (6 and 12).

Run: ``python examples/hexagonal_grid.py [--quick]``
"""

from __future__ import annotations

import argparse

import torch

from groupattn.actions import GSet
from groupattn.attention import OrbitalAttention
from groupattn.groups import PermutationGroup
from groupattn.nn import TransformerBlock
from groupattn.testing import assert_equivariant, equivariance_error


def hexagon_cells(radius: int) -> list[tuple[int, int, int]]:
    """Cube coordinates of the ``3·radius·(radius + 1) + 1`` cells, sorted."""
    return sorted(
        (q, r, -q - r)
        for q in range(-radius, radius + 1)
        for r in range(-radius, radius + 1)
        if abs(q + r) <= radius
    )


def hexagon_groups(radius: int) -> dict[str, PermutationGroup]:
    """C6 and D6 acting on the cells, from the 60° rotation and a reflection."""
    cells = hexagon_cells(radius)
    index = {c: i for i, c in enumerate(cells)}
    rotate = [index[(-r, -s, -q)] for q, r, s in cells]  # cell i moves to rotate[i]
    reflect = [index[(q, s, r)] for q, r, s in cells]
    n = len(cells)
    return {
        "C6": PermutationGroup([rotate], name=f"C6 on {n} cells"),
        "D6": PermutationGroup([rotate, reflect], name=f"D6 on {n} cells"),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller batch")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    errors: dict[str, float] = {}
    for radius in (1, 2):
        for name, group in hexagon_groups(radius).items():
            cells = GSet.natural(group)
            n = cells.num_points
            block = TransformerBlock(16, OrbitalAttention(16, 2, cells, bias_init_std=1.0)).double()
            baseline = TransformerBlock(
                16, OrbitalAttention(16, 2, cells, bias="pairwise", bias_init_std=1.0)
            ).double()
            x = torch.randn(2 if args.quick else 4, n, 16, dtype=torch.float64)
            report = assert_equivariant(block, x, group)  # all 6 or 12 elements
            bad = equivariance_error(baseline, x, group)
            errors[f"{name} {n} cells"] = report.max_error
            errors[f"{name} {n} cells pairwise"] = bad.max_error
            print(
                f"{name} on {n:>2} cells: order {group.order():>2}, {cells.num_orbits()} orbits of cells, "
                f"{cells.num_orbitals():>3} orbitals; orbital bias error {report.max_error:.1e}, "
                f"pairwise bias error {bad.max_error:.1e}"
            )
    return errors


if __name__ == "__main__":
    main()
