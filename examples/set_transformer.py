"""Set transformer: attention over n points, equivariant to all n! permutations (S_n).

The symmetric group S_n acting on n points has exactly two orbitals on ordered pairs —
``i = j`` and ``i ≠ j`` — so an invariant pairwise bias has two values per head (a
"self" bias and an "other" bias), and ``OrbitalAttention`` with it is equivariant to
every permutation of the set. Mean pooling then gives a permutation-invariant
readout. The orbitals come from the two generators of S_n (a transposition and an
n-cycle), never from listing n! elements, so n = 50 (50! ≈ 3·10⁶⁴ elements) costs
the same as n = 10. A free bias per pair (``bias="pairwise"``) remembers positions in
the list and breaks the symmetry.

The check uses the generators and sampled random permutations (all n! is out of reach).

Run: ``python examples/set_transformer.py [--quick]``
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from groupattn.actions import GSet, GSetField
from groupattn.attention import MeanPooling, OrbitalAttention
from groupattn.groups import GroupElement, SymmetricGroup
from groupattn.nn import TransformerBlock
from groupattn.testing import assert_equivariant, equivariance_error


def random_permutations(group: SymmetricGroup, count: int, seed: int = 0) -> list[GroupElement]:
    """The generators of ``S_n`` followed by ``count`` uniformly random permutations.

    Every permutation is an element of ``S_n``, so random permutations are uniform
    samples; the group is never listed.
    """
    gen = torch.Generator().manual_seed(seed)
    sampled = [
        GroupElement(group, tuple(torch.randperm(group.n, generator=gen).tolist()))
        for _ in range(count)
    ]
    return [*group.generators(), *sampled]


class SetTransformer(nn.Module):
    """Two transformer blocks of orbital attention over a set: ``(B, n, dim) → (B, n, dim)``.

    Contract: *equivariant* under ``S_n`` from ``GSetField(points)`` to itself (each
    block is; norms and MLPs act token by token).
    """

    def __init__(self, points: GSet, dim: int = 16, heads: int = 2, bias: str = "orbital") -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *[
                TransformerBlock(
                    dim, OrbitalAttention(dim, heads, points, bias=bias, bias_init_std=1.0)
                )
                for _ in range(2)
            ]
        )
        self.field = GSetField(points)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)

    def contract(self, group, input_type=None):  # type: ignore[no-untyped-def]
        from groupattn.nn import chain_contract

        return chain_contract(list(self.blocks.named_children()), group, input_type or self.field)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sampled permutations")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    count = 20 if args.quick else 200

    errors: dict[str, float] = {}
    for n in (10, 50):
        group = SymmetricGroup(n)
        points = GSet.natural(group)
        print(f"\n== S{n} on {n} points: {points.num_orbitals()} orbitals on pairs")
        model = SetTransformer(points).double()
        baseline = SetTransformer(points, bias="pairwise").double()
        x = torch.randn(2, n, 16, dtype=torch.float64)
        elements = random_permutations(group, count, seed=n)
        report = assert_equivariant(model, x, group, elements=elements)
        errors[f"S{n}"] = report.max_error
        print(
            f"orbital bias:  max error over {len(elements)} permutations = {report.max_error:.1e}"
        )
        # readout: the mean over the set is invariant
        pool = MeanPooling()
        print(f"mean pooling:  {pool.contract(group, GSetField(points)).describe()}")
        readout = nn.Sequential(model, pool)  # (B, n, 16) -> (B, 16)
        pooled = assert_equivariant(
            readout,
            x,
            group,
            elements=elements,
            input_type=GSetField(points),
            output_type=pool.contract(group, GSetField(points)).output_type,
        )
        errors[f"S{n} pooled"] = pooled.max_error
        print(f"pooled output: max change = {pooled.max_error:.1e}")
        bad = equivariance_error(baseline, x, group, elements=elements)
        errors[f"S{n} pairwise"] = bad.max_error
        print(
            f"pairwise bias: max error = {bad.max_error:.1e}; contract: {baseline.contract(group).reason}"
        )
    return errors


if __name__ == "__main__":
    main()
