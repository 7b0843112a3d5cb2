"""A product group: C4 × C2 acting on the tokens of a three-layer ring.

Twelve tokens sit on a cylinder: 4 positions around a ring, 3 layers along its axis
(token ``3·i + l`` is position ``i`` of layer ``l``). The group is the direct product
``DirectProduct(CyclicGroup(4), CyclicGroup(2))``: an element ``(r, s)`` turns the
ring by ``r`` quarter turns and, if ``s = 1``, flips the cylinder end over end
(layer ``l ↦ 2 − l``; the middle layer stays). The action is a ``GSet`` given by a
function of the element — the group is not a permutation group, and nothing in the
library knows about cylinders. The middle layer and the outer layers are two orbits
of tokens; the orbitals on pairs give the invariant bias. Every element is checked.

Run: ``python examples/product_group.py [--quick]``
"""

from __future__ import annotations

import argparse

import torch

from groupattn.actions import GSet, GSetField
from groupattn.attention import OrbitalAttention
from groupattn.groups import CyclicGroup, DirectProduct, GroupElement
from groupattn.nn import TransformerBlock
from groupattn.testing import assert_equivariant, equivariance_error

RING, LAYERS = 4, 3


def cylinder_permutation(g: GroupElement) -> list[int]:
    """Token ``3·i + l`` moves to ``3·((i + r) mod 4) + (l or 2 − l)``."""
    r, s = g.value
    return [
        LAYERS * ((i + r) % RING) + (LAYERS - 1 - layer if s else layer)
        for i in range(RING)
        for layer in range(LAYERS)
    ]


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller batch")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    group = DirectProduct(CyclicGroup(RING), CyclicGroup(2))
    tokens = GSet(group, RING * LAYERS, cylinder_permutation, name="C4xC2 on a 4x3 cylinder")
    print(
        f"{group.name}: order {group.order()}; {tokens.num_points} tokens in {tokens.num_orbits()} orbits "
        f"{tokens.orbits().tolist()}; {tokens.num_orbitals()} orbitals on pairs"
    )
    x = torch.randn(2 if args.quick else 4, tokens.num_points, 16, dtype=torch.float64)
    moved = GSetField(tokens).act(group, (1, 1), x)
    print(
        f"(1, 1) sends token 0 (position 0, layer 0) to token {cylinder_permutation(group.element((1, 1)))[0]}: "
        f"{torch.equal(moved[:, 5], x[:, 0])}"
    )

    block = TransformerBlock(16, OrbitalAttention(16, 2, tokens, bias_init_std=1.0)).double()
    baseline = TransformerBlock(
        16, OrbitalAttention(16, 2, tokens, bias="pairwise", bias_init_std=1.0)
    ).double()
    report = assert_equivariant(block, x, group)  # all 8 elements
    bad = equivariance_error(baseline, x, group)
    print(
        f"orbital bias:  max error over all {len(report.errors)} elements = {report.max_error:.1e}"
    )
    print(f"pairwise bias: max error = {bad.max_error:.1e}")
    return {"orbital": report.max_error, "pairwise": bad.max_error}


if __name__ == "__main__":
    main()
