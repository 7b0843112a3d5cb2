"""Periodic 1-D sequences: attention equivariant to every cyclic shift.

A periodic sequence of length L (a ring buffer, a closed contour, a day of hourly
readings) is acted on by the cyclic shifts, the translations ``Z_L`` of a 1 × L torus
(``TorusTranslations(1, L)``). ``GSet.grid`` turns them into a G-set of the L
positions; its orbitals on pairs are the L circular offsets ``(j − i) mod L``, so the
invariant bias is a circulant matrix — the same orbitals, and the same code path, as
the 2-D ``CirculantRelativeBias`` of the shift-equivariant ViT. A free bias per pair
(``bias="pairwise"``) is not shift-invariant. Every shift is checked.

Run: ``python examples/periodic_sequence.py [--quick]``
"""

from __future__ import annotations

import argparse

import torch

from groupattn.actions import GSet, GSetField
from groupattn.attention import OrbitalAttention
from groupattn.groups import TorusTranslations
from groupattn.nn import TransformerBlock
from groupattn.positional import CirculantRelativeBias, OrbitalBias
from groupattn.testing import assert_equivariant, equivariance_error


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter sequence")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    length = 12 if args.quick else 24
    shifts = TorusTranslations(1, length)
    positions = GSet.grid(shifts, 1, length)
    orbital = OrbitalBias(positions, num_heads=2)
    circulant = CirculantRelativeBias((1, length), num_heads=2)
    same = torch.equal(orbital.orbital_index, circulant.orbital_index)
    print(
        f"{length} positions under {length} cyclic shifts: {positions.num_orbitals()} orbitals "
        f"(circular offsets); same labels as CirculantRelativeBias: {same}"
    )
    print(f"orbital label of (i, j) for i = 0: {positions.orbitals()[0].tolist()}")

    block = TransformerBlock(16, OrbitalAttention(16, 2, positions, bias_init_std=1.0)).double()
    baseline = TransformerBlock(
        16, OrbitalAttention(16, 2, positions, bias="pairwise", bias_init_std=1.0)
    ).double()
    print(f"contract: {block.contract(shifts).describe()}")
    x = torch.randn(3, length, 16, dtype=torch.float64)
    report = assert_equivariant(block, x, shifts)  # every shift
    bad = equivariance_error(baseline, x, shifts)
    print(f"orbital bias:  max error over all {len(report.errors)} shifts = {report.max_error:.1e}")
    print(f"pairwise bias: max error = {bad.max_error:.1e}")
    # by hand: rolling the sequence rolls the output
    moved = block(torch.roll(x, 5, dims=1))
    print(
        f"block(roll(x, 5)) == roll(block(x), 5): {torch.allclose(moved, torch.roll(block(x), 5, dims=1))}"
    )
    assert GSetField(positions).act(shifts, (0, 5), x).equal(torch.roll(x, 5, dims=1))
    return {
        "orbital": report.max_error,
        "pairwise": bad.max_error,
        "same_as_circulant": float(same),
    }


if __name__ == "__main__":
    main()
